// Better Compute console: sign-in, the bearer token on every request, live
// refresh, local times, and the release log's verification in the browser.
// The token lives in sessionStorage only: never in a URL, a cookie or a log.
(function () {
  "use strict";
  var TOKEN = "bc.token", WHO = "bc.who", TENANT = "bc.tenant", LOGKEY = "bc.logkey", OIDC = "bc.oidc";
  var body = document.body;
  var page = body.dataset.page || "";
  var etags = {};

  function store() { return window.sessionStorage; }
  function token() { return store().getItem(TOKEN); }
  function tenant() { return store().getItem(TENANT) || window.localStorage.getItem(TENANT) || ""; }
  function setTenant(t) { store().setItem(TENANT, t); window.localStorage.setItem(TENANT, t); }

  function signinURL() {
    return "/console/signin?next=" + encodeURIComponent(location.pathname + location.search);
  }

  function nextFrom(search) {
    var next = new URLSearchParams(search).get("next") || "/console/pools";
    // Only a path of the console itself: never a redirect elsewhere.
    return /^\/console\/[^\/\\]/.test(next) || next === "/console/" ? next : "/console/pools";
  }

  function withTenant(href, t) {
    var u = new URL(href, location.origin);
    if (u.origin !== location.origin || !u.pathname.startsWith("/console/") || u.pathname.startsWith("/console/assets/")) return href;
    if (!u.searchParams.get("tenant") && t) u.searchParams.set("tenant", t);
    return u.pathname + u.search;
  }

  function showWho() {
    var who = store().getItem(WHO), el = document.getElementById("whoami"), out = document.getElementById("signout");
    if (!el) return;
    if (who) {
      el.textContent = who + " · tenant " + (currentTenant() || "?");
      out.hidden = false;
    }
    out.addEventListener("click", function () {
      store().removeItem(TOKEN);
      store().removeItem(WHO);
      location.assign("/console/signin");
    });
  }

  function currentTenant() {
    return new URLSearchParams(location.search).get("tenant") || tenant();
  }

  // ---- times: UTC on the page, the viewer's local time on hover ----
  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (!isNaN(d)) t.title = "your time: " + d.toLocaleString();
    });
  }

  // ---- htmx: credentials, versions, errors ----
  document.addEventListener("htmx:configRequest", function (e) {
    var t = token();
    if (t) e.detail.headers["Authorization"] = "Bearer " + t;
    var tag = etags[e.detail.path];
    if (tag && e.detail.verb === "get") e.detail.headers["If-None-Match"] = tag;
  });
  document.addEventListener("htmx:afterRequest", function (e) {
    var xhr = e.detail.xhr;
    if (!xhr || e.detail.requestConfig.verb !== "get") return;
    var tag = xhr.getResponseHeader("ETag"), path = e.detail.requestConfig.path;
    if (xhr.status === 200) {
      if (tag) etags[path] = tag; else delete etags[path];
    }
    if (xhr.status === 401) location.assign(signinURL());
  });
  // Links in a fragment (the timeline's are relative, without the tenant)
  // carry the tenant the viewer acts as.
  function keepTenant(root) {
    var t = currentTenant();
    root.querySelectorAll("a[href]").forEach(function (a) {
      var u = new URL(a.getAttribute("href"), location.href);
      if (u.origin === location.origin && u.pathname.startsWith("/console/")) a.setAttribute("href", withTenant(u.pathname + u.search, t));
    });
  }
  document.addEventListener("htmx:afterSettle", function (e) {
    keepTenant(e.detail.elt || document);
    localTimes(e.detail.elt || document);
    if (document.getElementById("checkpoint-status")) verifyLog();
  });
  // An action in flight is never lost to a live refresh: while one is out,
  // refreshes are neither sent nor swapped in (a swap would remove the
  // button whose request it is, and htmx drops a removed element's request).
  var acting = 0;
  function live(e) { return e.detail.elt && e.detail.elt.dataset && e.detail.elt.dataset.live; }
  document.addEventListener("htmx:beforeRequest", function (e) {
    if (e.detail.requestConfig.verb !== "get") { acting++; return; }
    if (acting && live(e)) e.preventDefault();
  });
  document.addEventListener("htmx:afterRequest", function (e) {
    if (e.detail.requestConfig.verb !== "get") acting = Math.max(0, acting - 1);
  });
  document.addEventListener("htmx:beforeSwap", function (e) {
    if (acting && live(e) && e.detail.requestConfig.verb === "get") e.detail.shouldSwap = false;
  });
  document.addEventListener("htmx:sendError", function () {
    var o = document.getElementById("outcome");
    if (o) o.textContent = "The console could not be reached: retrying with the next refresh.";
  });
  document.body.addEventListener("bc-refresh", loadPage);

  function fragmentURL() {
    var q = new URLSearchParams(location.search);
    if (!q.get("tenant") && tenant()) q.set("tenant", tenant());
    return "/console/f" + (page === "/" ? "/" : page) + "?" + q.toString();
  }

  function loadPage() {
    window.htmx.ajax("GET", fragmentURL(), { target: "#main", swap: "innerHTML" });
  }

  // ---- sign-in ----
  function b64url(bytes) {
    var s = "";
    new Uint8Array(bytes).forEach(function (b) { s += String.fromCharCode(b); });
    return btoa(s).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }
  function random() { return b64url(crypto.getRandomValues(new Uint8Array(32))); }

  function showSigninError(msg) {
    var el = document.getElementById("signin-error");
    el.textContent = msg;
    el.hidden = false;
  }

  function endpoints() {
    if (body.dataset.authorize && body.dataset.token) {
      return Promise.resolve({ authorization_endpoint: body.dataset.authorize, token_endpoint: body.dataset.token });
    }
    return fetch(body.dataset.issuer.replace(/\/$/, "") + "/.well-known/openid-configuration").then(function (r) {
      if (!r.ok) throw new Error("discovery answered " + r.status);
      return r.json();
    });
  }

  function wireSignin() {
    var dev = document.getElementById("dev-signin");
    if (dev) {
      dev.addEventListener("submit", function (e) {
        e.preventDefault();
        var p = dev.principal.value.trim(), t = dev.tenant.value.trim();
        if (!p || !t) return;
        store().setItem(TOKEN, "dev:" + p);
        store().setItem(WHO, "dev:" + p + " (local dev sign-in)");
        setTenant(t);
        location.assign(withTenant(nextFrom(location.search), t));
      });
    }
    var oidc = document.getElementById("oidc-signin");
    if (oidc) {
      oidc.addEventListener("submit", function (e) {
        e.preventDefault();
        var t = oidc.tenant.value.trim();
        var verifier = random(), state = random(), nonce = random();
        endpoints().then(function (ep) {
          return crypto.subtle.digest("SHA-256", new TextEncoder().encode(verifier)).then(function (d) {
            store().setItem(OIDC, JSON.stringify({ verifier: verifier, state: state, nonce: nonce, token: ep.token_endpoint,
              tenant: t, next: nextFrom(location.search) }));
            var u = new URL(ep.authorization_endpoint);
            u.searchParams.set("response_type", "code");
            u.searchParams.set("client_id", body.dataset.clientId);
            u.searchParams.set("redirect_uri", location.origin + "/console/callback");
            u.searchParams.set("scope", body.dataset.scopes || "openid");
            u.searchParams.set("state", state);
            u.searchParams.set("nonce", nonce);
            u.searchParams.set("code_challenge", b64url(d));
            u.searchParams.set("code_challenge_method", "S256");
            location.assign(u.toString());
          });
        }).catch(function (err) { showSigninError("Sign-in could not start: " + err.message); });
      });
    }
  }

  function claimsOf(jwt) {
    try {
      var p = jwt.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      return JSON.parse(atob(p + "===".slice((p.length + 3) % 4)));
    } catch (e) { return {}; }
  }

  function callback() {
    var q = new URLSearchParams(location.search);
    var saved = JSON.parse(store().getItem(OIDC) || "{}");
    store().removeItem(OIDC);
    // The code leaves the address bar at once.
    history.replaceState(null, "", "/console/callback");
    var main = document.getElementById("main");
    if (q.get("error") || !q.get("code") || q.get("state") !== saved.state) {
      main.textContent = "Sign-in failed: " + (q.get("error_description") || q.get("error") || "the answer does not match the request");
      return;
    }
    var form = new URLSearchParams({ grant_type: "authorization_code", code: q.get("code"), client_id: body.dataset.clientId,
      redirect_uri: location.origin + "/console/callback", code_verifier: saved.verifier });
    fetch(saved.token, { method: "POST", headers: { "Content-Type": "application/x-www-form-urlencoded" }, body: form })
      .then(function (r) { return r.json().then(function (j) { if (!r.ok) throw new Error(j.error_description || j.error || r.status); return j; }); })
      .then(function (j) {
        var jwt = j.id_token || j.access_token;
        var c = claimsOf(jwt);
        if (j.id_token && c.nonce !== saved.nonce) throw new Error("the token's nonce does not match");
        store().setItem(TOKEN, jwt);
        store().setItem(WHO, (c.email || c["cognito:username"] || c.sub || "signed in"));
        setTenant(saved.tenant);
        location.assign(withTenant(saved.next || "/console/pools", saved.tenant));
      })
      .catch(function (err) { main.textContent = "Sign-in failed: " + err.message; });
  }

  function wireSettings() {
    var f = document.getElementById("settings");
    if (!f) return;
    f.tenant.value = currentTenant();
    f.logkey.value = window.localStorage.getItem(LOGKEY) || "";
    f.addEventListener("submit", function (e) {
      e.preventDefault();
      setTenant(f.tenant.value.trim());
      var k = f.logkey.value.trim();
      if (k) window.localStorage.setItem(LOGKEY, k); else window.localStorage.removeItem(LOGKEY);
      document.getElementById("settings-saved").textContent = "Saved.";
    });
  }

  // ---- the release log, verified here ----
  var enc = new TextEncoder();
  function b64(s) { var bin = atob(s), out = new Uint8Array(bin.length); for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i); return out; }
  function concat() {
    var n = 0, i; for (i = 0; i < arguments.length; i++) n += arguments[i].length;
    var out = new Uint8Array(n), o = 0;
    for (i = 0; i < arguments.length; i++) { out.set(arguments[i], o); o += arguments[i].length; }
    return out;
  }
  function sha256(bytes) { return crypto.subtle.digest("SHA-256", bytes).then(function (d) { return new Uint8Array(d); }); }
  function hex(bytes) { return Array.prototype.map.call(bytes, function (b) { return ("0" + b.toString(16)).slice(-2); }).join(""); }
  function equal(a, b) { if (a.length !== b.length) return false; for (var i = 0; i < a.length; i++) if (a[i] !== b[i]) return false; return true; }

  // derToRaw turns an ASN.1 DER ECDSA signature into r‖s (what WebCrypto takes).
  function derToRaw(der) {
    function int(at) {
      if (der[at] !== 0x02) throw new Error("signature is not DER");
      var len = der[at + 1], v = der.slice(at + 2, at + 2 + len);
      while (v.length > 32 && v[0] === 0) v = v.slice(1);
      if (v.length > 32) throw new Error("signature integer too long");
      var out = new Uint8Array(32); out.set(v, 32 - v.length);
      return { v: out, next: at + 2 + len };
    }
    if (der[0] !== 0x30) throw new Error("signature is not DER");
    var r = int(2), s = int(r.next);
    return concat(r.v, s.v);
  }

  // parseKey reads a C2SP verifier key: name+id+base64(type ‖ key).
  function parseKey(vkey) {
    var parts = vkey.split("+");
    if (parts.length !== 3) return Promise.reject(new Error("the pinned key is not name+id+key"));
    var raw = b64(parts[2]), name = parts[0], id = parts[1];
    if (raw[0] === 0x02) {
      var der = raw.slice(1);
      return sha256(der).then(function (h) {
        if (hex(h.slice(0, 4)) !== id) throw new Error("the pinned key's id does not match its key");
        return crypto.subtle.importKey("spki", der, { name: "ECDSA", namedCurve: "P-256" }, false, ["verify"]);
      }).then(function (k) { return { name: name, id: id, key: k, type: 2 }; });
    }
    if (raw[0] === 0x01) {
      return crypto.subtle.importKey("raw", raw.slice(1), { name: "Ed25519" }, false, ["verify"])
        .then(function (k) { return { name: name, id: id, key: k, type: 1 }; });
    }
    return Promise.reject(new Error("unknown signature type of the pinned key"));
  }

  // openNote verifies a signed note under the key and returns its text.
  function openNote(note, k) {
    var split = note.lastIndexOf("\n\n");
    if (split < 0) return Promise.reject(new Error("not a signed note"));
    var text = note.slice(0, split + 1), sigs = note.slice(split + 2).split("\n");
    var mine = null;
    sigs.forEach(function (line) {
      var m = /^\u2014 (\S+) (\S+)$/.exec(line);
      if (!m || m[1] !== k.name) return;
      var sig = b64(m[2]);
      if (hex(sig.slice(0, 4)) === k.id) mine = sig.slice(4);
    });
    if (!mine) return Promise.reject(new Error("no signature by the pinned key " + k.name));
    var alg = k.type === 2 ? { name: "ECDSA", hash: "SHA-256" } : { name: "Ed25519" };
    var sig;
    try { sig = k.type === 2 ? derToRaw(mine) : mine; } catch (e) { return Promise.reject(e); }
    return crypto.subtle.verify(alg, k.key, sig, enc.encode(text)).then(function (ok) {
      if (!ok) throw new Error("the signature does not verify under the pinned key");
      return text;
    });
  }

  function nodeHash(l, r) { return sha256(concat(new Uint8Array([1]), l, r)); }

  // inclusion checks an RFC 9162 inclusion proof of leaf at index in a tree of size.
  function inclusion(index, size, leaf, path, root) {
    if (index >= size) return Promise.reject(new Error("index beyond the tree"));
    var fn = index, sn = size - 1, p = Promise.resolve(leaf);
    path.forEach(function (h) {
      p = p.then(function (r) {
        if (sn === 0) throw new Error("the proof is too long");
        var out;
        if (fn % 2 === 1 || fn === sn) {
          out = nodeHash(h, r);
          if (fn % 2 === 0) while (fn % 2 === 0 && fn !== 0) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
        } else {
          out = nodeHash(r, h);
        }
        fn = Math.floor(fn / 2); sn = Math.floor(sn / 2);
        return out;
      });
    });
    return p.then(function (r) {
      if (sn !== 0) throw new Error("the proof is too short");
      if (!equal(r, root)) throw new Error("the proof does not lead to the checkpoint's root");
    });
  }

  function mark(el, ok, words) {
    el.classList.remove("pending", "ok", "bad");
    el.classList.add(ok ? "ok" : "bad");
    el.textContent = (ok ? "\u2713 verified: " : "\u2717 not verified: ") + words;
  }

  function verifyLog() {
    var cp = document.getElementById("checkpoint-status");
    if (!cp || cp.dataset.done) return;
    cp.dataset.done = "1";
    var incl = document.querySelectorAll(".incl");
    var vkey = window.localStorage.getItem(LOGKEY);
    if (!vkey) {
      mark(cp, false, "no log key is pinned: set it in Settings");
      incl.forEach(function (el) { mark(el, false, "no log key is pinned"); });
      return;
    }
    parseKey(vkey.trim()).then(function (k) {
      return openNote(cp.dataset.checkpoint, k).then(function (text) {
        var lines = text.split("\n");
        if (lines[0] !== k.name) throw new Error("the checkpoint's origin is " + lines[0] + ", the pinned key's is " + k.name);
        if (!/^\d+$/.test(lines[1])) throw new Error("the checkpoint's size is not a number");
        var size = parseInt(lines[1], 10), root = b64(lines[2]);
        if (String(size) !== cp.dataset.size) throw new Error("the checkpoint is of size " + size + ", the page says " + cp.dataset.size);
        mark(cp, true, "signed by " + k.name + " (key " + k.id + "), " + size + " entries");
        return { size: size, root: root };
      });
    }).then(function (tree) {
      incl.forEach(function (el) {
        var d = el.dataset;
        if (!d.entry) { mark(el, false, "the API gave no entry to check"); return; }
        var entry = b64(d.entry), index = parseInt(d.index, 10);
        sha256(entry).then(function (digest) {
          if ("sha256:" + hex(digest) !== d.digest) throw new Error("the entry is not the release's signed statement (digest differs)");
          var st = JSON.parse(new TextDecoder().decode(entry));
          if (st.version !== d.version || String(st.sequence) !== d.sequence) throw new Error("the entry is release " + st.version);
          var path = d.inclusion ? d.inclusion.split(" ").map(b64) : [];
          return sha256(concat(new Uint8Array([0]), entry)).then(function (leaf) { return inclusion(index, tree.size, leaf, path, tree.root); });
        }).then(function () { mark(el, true, "entry " + index + " of the checkpoint"); })
          .catch(function (err) { mark(el, false, err.message); });
      });
    }).catch(function (err) {
      mark(cp, false, err.message);
      incl.forEach(function (el) { mark(el, false, "the checkpoint did not verify"); });
    });
  }

  // ---- start ----
  function start() {
    showWho();
    localTimes(document);
    var t = currentTenant();
    document.querySelectorAll("header a[href^='/console/']").forEach(function (a) { a.setAttribute("href", withTenant(a.getAttribute("href"), t)); });
    if (page === "/callback") { callback(); return; }
    if (body.dataset.nosignin === "true") { wireSignin(); return; }
    if (!token()) { location.assign(signinURL()); return; }
    if (page === "/settings") { wireSettings(); return; }
    if (t && !new URLSearchParams(location.search).get("tenant")) {
      var q = new URLSearchParams(location.search); q.set("tenant", t);
      history.replaceState(null, "", location.pathname + "?" + q.toString());
    }
    loadPage();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
