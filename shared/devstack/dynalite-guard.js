// dynalite-guard runs dynalite's CLI unchanged but for two things.
//
// 1. A client that drops its connection in the middle of a request no longer
//    ends the server. dynalite 4.0.0 (index.js, httpHandler) rethrows the
//    request stream's 'aborted' error, which nothing catches, so any client
//    whose request context was cancelled mid-call took the whole local stack
//    down.
// 2. An expression it has parsed is not parsed again. dynalite parses every
//    request's expressions with PEG parsers that resolve the #names and
//    :values as they go; profiled under the test suite, that parsing was
//    about half of dynalite's CPU, and most parses repeated one already
//    made with the same text — the names and values differing only in what
//    the parse does not read (a create writes the same shape with other ids;
//    a map key such as a reservation's id is a #name). A parse reads of the
//    names only which equal which (paths that overlap) and which equal an
//    identifier of the text, and of the values only their types, but for
//    BETWEEN (compares its bounds) and attribute_type (reads its type name);
//    the tree holds the resolved names and the values themselves. So the
//    cache keys on the text, the names' pattern of equalities and the
//    values' types (and, under BETWEEN, their order); it parses once with
//    stand-ins (a distinct string per distinct name, a copy of each value),
//    keeps that tree, and answers each request with a copy of it holding the
//    request's own names and values where the stand-ins were. The names and
//    values the expression uses are marked used on every hit (dynalite
//    refuses a request that leaves one unused). Parsed as dynalite alone
//    parses them, every time: an expression with attribute_type (it reads
//    its value), a refusal (its message may quote a name or a value) and a
//    parse that throws (a malformed expression).
//
// Usage: node dynalite-guard.js <path to dynalite/cli.js> [dynalite flags]
'use strict'

const path = require('path')

process.on('uncaughtException', function (err) {
  if (err && err.code === 'ECONNRESET' && err.message === 'aborted') {
    return // the client went away; its request has no one to answer
  }
  console.error((err && err.stack) || err)
  process.exit(1)
})

const cli = process.argv[2]
process.argv.splice(2, 1)

// Entries kept before the cache starts over: a few thousand distinct
// expressions cover a test package or a local stack's working set.
const maxEntries = 20000

// Expressions whose parse reads more of the values than their types.
const ordersValues = /between/i
const readsValues = /attribute_type/i
const scalar = new Set(['S', 'N', 'B'])

for (const name of ['conditionParser', 'updateParser', 'projectionParser']) {
  const parser = require(path.join(path.dirname(cli), 'db', name))
  const parse = parser.parse
  const cache = new Map()
  parser.parse = function (str, options) {
    const context = options.context
    const names = context.attrNames || {}
    const vals = context.attrVals || {}
    const shape = namesShape(str, names)
    const vkey = valuesKey(str, vals, context)
    if (!shape || !vkey) return parse.call(this, str, options)
    const key = str + '\0' + JSON.stringify(shape.pattern) + '\0' + vkey
    const hit = cache.get(key)
    if (hit) {
      markUsed(context, hit)
      return build(hit.tree, hit, shape.distinct, vals)
    }
    // Parsed against stand-ins for the names and values, and every one
    // unused: the tree says where each sits and which this expression uses,
    // whatever another expression of the request marked before it.
    const copies = Object.fromEntries(Object.entries(vals).map(([k, v]) => [k, v && typeof v === 'object' ? Object.assign({}, v) : v]))
    const own = Object.assign({}, context, {
      attrNames: Object.fromEntries(shape.pattern.map(([k, i]) => [k, stand(i)])),
      attrVals: copies,
      unusedAttrNames: Object.fromEntries(Object.keys(names).map(k => [k, true])),
      unusedAttrVals: Object.fromEntries(Object.keys(vals).map(k => [k, true])),
    })
    const tree = parse.call(this, str, Object.assign({}, options, { context: own })) // throws for a malformed expression: not kept
    if (!tree || typeof tree !== 'object') return parse.call(this, str, options) // a refusal: the request's own words
    const entry = {
      tree,
      usedNames: Object.keys(names).filter(k => !(k in own.unusedAttrNames)),
      usedVals: Object.keys(vals).filter(k => !(k in own.unusedAttrVals)),
      valueOf: new Map(Object.entries(copies).filter(([, v]) => v && typeof v === 'object').map(([k, v]) => [v, k])),
    }
    if (cache.size >= maxEntries) cache.clear()
    cache.set(key, entry)
    markUsed(context, entry)
    return build(tree, entry, shape.distinct, vals)
  }
}

// namesShape is what a parse may read of the names: which equal which (as
// the index of each one's first equal), or null (the parse is not kept)
// when one equals an identifier of the text itself (or holds a NUL, as the
// stand-ins do).
function namesShape (str, names) {
  const first = new Map()
  const pattern = Object.entries(names).sort(byKey).map(([k, v]) => {
    if (!first.has(v)) first.set(v, first.size)
    return [k, first.get(v)]
  })
  const words = new Set(str.replace(/[#:][A-Za-z0-9_]+/g, ' ').match(/[A-Za-z_][A-Za-z0-9_]*/g) || [])
  for (const v of first.keys()) if (words.has(v) || String(v).includes('\u0000')) return null
  return { pattern, distinct: [...first.keys()] }
}

// Keyed in the order of the names and values, not the order a client's
// map happened to send them in.
function byKey (a, b) { return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0 }

// A stand-in for the i-th distinct name: no name in a text or a request
// holds a NUL.
function stand (i) { return '\u0000' + i + '\u0000' }
const standIn = /^\u0000(\d+)\u0000$/

// valuesKey is what a parse may read of the values: each one's type keys;
// under BETWEEN also the order of each two of one type; null (the parse is
// not kept) when it reads the values themselves: attribute_type, or BETWEEN
// with a value that is not one string, number or binary.
function valuesKey (str, vals, context) {
  if (readsValues.test(str) || (ordersValues.test(str) && typeof context.compare !== 'function')) return null
  const entries = Object.entries(vals).sort(byKey)
  const types = entries.map(([k, v]) =>
    [k, v && typeof v === 'object' && !Array.isArray(v) ? Object.keys(v).filter(t => v[t] != null) : typeof v])
  if (!ordersValues.test(str)) return JSON.stringify(types)
  if (types.some(([, t]) => typeof t !== 'object' || t.length !== 1 || !scalar.has(t[0]))) return null
  const order = []
  for (let i = 0; i < entries.length; i++) {
    for (let j = 0; j < entries.length; j++) {
      if (i !== j && types[i][1][0] === types[j][1][0]) order.push(context.compare('GT', entries[i][1], entries[j][1]) ? 1 : 0)
    }
  }
  return JSON.stringify(types) + JSON.stringify(order)
}

// build copies the kept tree with the request's own names and values where
// the stand-ins are (object keys too), keeping what the tree shares shared
// and each object's prototype (dynalite keeps some paths in objects without
// one).
function build (tree, entry, realNames, vals) {
  const memo = new Map()
  const copy = node => {
    if (typeof node === 'string') {
      const m = standIn.exec(node)
      return m ? realNames[+m[1]] : node
    }
    if (!node || typeof node !== 'object') return node
    if (entry.valueOf.has(node)) return vals[entry.valueOf.get(node)]
    if (memo.has(node)) return memo.get(node)
    const out = Array.isArray(node) ? new Array(node.length) : Object.create(Object.getPrototypeOf(node))
    memo.set(node, out)
    for (const k of Object.keys(node)) out[Array.isArray(node) ? k : copy(k)] = copy(node[k])
    return out
  }
  return copy(tree)
}

function markUsed (context, entry) {
  for (const k of entry.usedNames) delete context.unusedAttrNames[k]
  for (const k of entry.usedVals) delete context.unusedAttrVals[k]
}

require(cli)
