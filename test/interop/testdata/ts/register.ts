// A releases/register call typed by what openapi-typescript makes of
// docs/openapi.json (openapi.d.ts, generated beside this file by
// typescript_test.go, then compiled with tsc --strict).
import type { components, paths } from "./openapi";

type Envelope = components["schemas"]["Envelope"];
type Register = paths["/api/compute/releases/register"]["post"];
type RegisterBody = Register["requestBody"]["content"]["application/json"];
type RegisterOK = Register["responses"]["200"]["content"]["application/json"];
type Register400 = Register["responses"]["400"]["content"]["application/json"];
type Register409 = Register["responses"]["409"]["content"]["application/json"];

// A manifest as bcctl sign writes it (keyid present or left out), and one
// that carries members DSSE does not define: consumers ignore them.
const manifest: Envelope = {
  payloadType: "application/vnd.bettercompute.release.v1+json",
  payload: "eyJ2ZXJzaW9uIjoiMS4wLjAifQ==",
  signatures: [
    { keyid: "0eb99674ddd1e9eb77524c7954eeca5f20d8b94d63d1fb0aca5f6ac89a243457", sig: "MEUCIQDf" },
    { sig: "MEQCIFx" },
  ],
};
const bundled: Envelope = { ...manifest, extension: { kind: "example" }, signatures: [{ sig: "MEQCIFx", cert: "-----BEGIN CERTIFICATE-----" }] };

export function body(m: Envelope = manifest): RegisterBody {
  return { tenantId: "platform", manifest: m };
}

export async function register(baseUrl: string, token: string): Promise<string> {
  const res = await fetch(`${baseUrl}/api/compute/releases/register`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${token}` },
    body: JSON.stringify(body(bundled)),
  });
  switch (res.status) {
    case 200: {
      const ok = (await res.json()) as RegisterOK;
      const version: string = ok.release.version;
      const sequence: number = ok.release.sequence;
      return `${version} (${sequence})${ok.replayed ? " again" : ""}`;
    }
    case 400: {
      // A complete error schema: code is the status's enum, message and
      // details are typed.
      const e = (await res.json()) as Register400;
      const code: "INVALID_INPUT" = e.error.code;
      const message: string = e.error.message;
      const latest: number | undefined = e.error.details.latestSequence;
      return `${code}: ${message} (${e.error.details.reason ?? "no reason"}, latest ${latest ?? "-"}, request ${e.requestId})`;
    }
    case 409: {
      const e = (await res.json()) as Register409;
      const code: "CONFLICT" = e.error.code;
      return `${code}: ${e.error.message} (${e.error.details.version} at ${e.error.details.sequence})`;
    }
  }
  return `HTTP ${res.status}`;
}
