package release_test

import (
	"crypto"
	"testing"

	"github.com/bettercompute/control-plane/shared/release"
)

func newKey(t testing.TB, alg string) crypto.Signer {
	t.Helper()
	k, err := release.GenerateKey(alg)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func keyID(t testing.TB, pub crypto.PublicKey) string {
	t.Helper()
	id, err := release.KeyID(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
