package rolloutdb

import (
	"testing"

	"github.com/bettercompute/control-plane/shared/dynamo"
)

// TestAttributesDocumented holds every stored attribute of this store's
// items to the glossary (attributes): each name is explained once there,
// and the glossary names nothing no item stores.
func TestAttributesDocumented(t *testing.T) {
	missing, unused := dynamo.Undocumented(attributes, storedItems)
	for _, m := range missing {
		t.Errorf("attribute %s is not in the glossary", m)
	}
	for _, u := range unused {
		t.Errorf("the glossary explains %s, which no item stores", u)
	}
}
