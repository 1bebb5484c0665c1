package rolloutdb

// attributes is the glossary of this store's own items. A rollout item
// and a progress item are the domain's Record and Progress marshalled by
// their JSON names (rollout.go of package rollout says what each means),
// plus the table's keys (pk, sk, lsk, ssk, psk, dueShard, dueAt,
// expiresAt); TestAttributesDocumented holds the item types declared here
// to this glossary.
var attributes = map[string]string{
	"claim.pk": "partition key: POOL#<poolId>", "claim.sk": "sort key: #ROLLOUT",
	"claim.rid": "the non-terminal rollout that holds the pool (removed when it ends)",
}

// storedItems are the item types whose names the glossary holds.
var storedItems = map[string]any{"claim": claimItem{}}
