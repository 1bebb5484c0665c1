package releasedb

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"

	"github.com/bettercompute/control-plane/shared/dynamo/schema"
	"github.com/bettercompute/control-plane/shared/release"
)

// TestAttributeNames holds every item's attributes (its dynamodbav tags,
// which must be literals) to the names defined once in items.go: an
// attribute added under a tag no constant defines fails here.
func TestAttributeNames(t *testing.T) {
	defined := map[string]bool{schema.AttrPK: true, schema.AttrSK: true, schema.AttrLSK: true}
	for _, n := range []string{attrState, attrPendingAt, attrVersion, attrSeq, attrDigest, attrLeaf, attrLogIndex,
		attrBinaries, attrExpires, attrSigners, attrRegisteredAt, attrRegisteredBy, attrVer, attrEnvelope, attrN,
		attrHashes, attrNote} {
		if defined[n] {
			t.Errorf("attribute %q defined twice", n)
		}
		defined[n] = true
	}
	i, now := int64(3), time.Now()
	items := map[string]any{
		"release":  releaseItem{LSK: "x", LogIndex: &i, Expires: &now, Binaries: []release.Binary{{}}},
		"head":     headItem{},
		"envelope": envelopeItem{Manifest: []byte("{}")},
		"count":    countItem{},
		"entry":    logEntryItem{HS: []byte{1}},
		"cp":       logCPItem{},
	}
	seen := 0
	for kind, it := range items {
		av, err := attributevalue.MarshalMap(it)
		if err != nil {
			t.Fatal(err)
		}
		for name := range av {
			seen++
			if !defined[name] {
				t.Errorf("%s item attribute %q is not one of items.go's names", kind, name)
			}
		}
	}
	if seen < len(defined) {
		t.Errorf("marshalled %d attributes, fewer than the %d names: the check reads too little", seen, len(defined))
	}
}
