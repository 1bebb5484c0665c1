package capacitydb

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"

	"github.com/bettercompute/control-plane/shared/capacity"
	"github.com/bettercompute/control-plane/shared/dynamo"
)

// A whole node's placement conditions on every device's version. dynalite
// parses nested parentheses in exponential time (a count-7 create took
// seconds when each device's condition nested one level deeper), so the
// condition must stay flat whatever the node's size.
func TestVersionConditionsAreFlat(t *testing.T) {
	nd := capacity.NodeHour{Size: 64, Versions: map[int]int64{3: 2, 40: 7}}
	conds, upd := versions(nd, capacity.Full(64), []expression.ConditionBuilder{expression.AttributeExists(dynamo.Path("a", "r1"))}, expression.UpdateBuilder{})
	if len(conds) != 65 {
		t.Fatalf("%d conditions, want 65 (the entry and 64 devices)", len(conds))
	}
	e, err := expression.NewBuilder().WithCondition(dynamo.All(conds)).WithUpdate(upd).Build()
	if err != nil {
		t.Fatal(err)
	}
	depth, deepest := 0, 0
	for _, r := range *e.Condition() {
		switch r {
		case '(':
			depth++
			deepest = max(deepest, depth)
		case ')':
			depth--
		}
	}
	if deepest > 2 {
		t.Fatalf("condition nests %d levels of parentheses, want at most 2: %s", deepest, *e.Condition())
	}
}
