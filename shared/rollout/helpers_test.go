package rollout_test

import (
	"crypto"
	"testing"

	"github.com/bettercompute/control-plane/shared/rollout"
)

func newKey(t testing.TB, alg string) crypto.Signer {
	t.Helper()
	k, err := rollout.GenerateKey(alg)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func keyID(t testing.TB, pub crypto.PublicKey) string {
	t.Helper()
	id, err := rollout.KeyID(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
