package capacitydb

// attributes is the glossary of this store's items: what every stored
// attribute means, by item and path (a nested record's names under its
// parent's). Short names are billed on every item (a write is charged by
// the item's size), so the hot items keep them short, and this is the one
// place each is explained; TestAttributesDocumented holds every item
// type's names to it. Attributes written only through update expressions
// are in expressionOnly.
var attributes = map[string]string{
	// Every item.
	"pool.pk": "partition key: POOL#<poolId>", "pool.sk": "sort key: #POOL", "pool.kind": "item kind: pool",
	"pool.poolId": "the pool's global id", "pool.ownerTenantId": "the tenant that owns it",
	"pool.resources": "device count of each resource", "pool.nodeSize": "devices per node of each resource",
	"pool.createdAt": "when it was created", "pool.dueShard": "due index partition", "pool.dueAt": "when the reconciler looks at it next (creation, then its hours ahead)",
	"pool.provTo": "every hour before this one (hours since the epoch) is provisioned",

	"poolView.pk": "partition key: TENANT#<tenant>", "poolView.sk": "sort key: POOL#<poolId>", "poolView.kind": "item kind: poolView",
	"poolView.poolId": "the pool's id", "poolView.ownerTenantId": "its owner", "poolView.resources": "its device counts",
	"poolView.nodeSize": "its node sizes", "poolView.createdAt": "when the pool was created",
	"poolView.dueShard": "unused on views (the pool item's field)", "poolView.dueAt": "unused on views (the pool item's field)",
	"poolView.provTo": "unused on views (the pool item's field)",

	"quota.pk": "partition key: TENANT#<tenant>", "quota.sk": "sort key: QUOTA#<pool>#<resource>", "quota.kind": "item kind: quota",
	"quota.tenantId": "the tenant it caps", "quota.poolId": "the pool", "quota.resource": "the resource",
	"quota.max": "the cap", "quota.used": "what live reservations hold charged", "quota.free": "max − used (what a charge's condition reads)",
	"quota.q":   "charge records in flight, by reservation id (bounded by MaxInFlight)",
	"quota.q.k": "a record's kind: c (charged) or v (voided: given back, its placement still to undo)",
	"quota.q.n": "the count charged", "quota.q.p": "the placement it is for: node, mask, node, mask, …",
	"quota.cr":        "credits given and not yet forgotten, by reservation id: the count",
	"quota.updatedAt": "when max or used last changed", "quota.dueShard": "due index partition", "quota.dueAt": "when the reconciler settles its records",

	"reservation.pk": "partition key: TENANT#<tenant>", "reservation.sk": "sort key: RES#<id>", "reservation.kind": "item kind: reservation",
	"reservation.lsk": "`ordered` LSI key of listed states: RES#<createdAt>#<id>", "reservation.ssk": "`bystate` LSI key: <state>#<createdAt>#<id>",
	"reservation.psk":           "`bypool` LSI key of listed states: <pool>#<createdAt>#<id>",
	"reservation.reservationId": "its id", "reservation.tenantId": "its tenant", "reservation.poolId": "its pool", "reservation.resource": "its resource",
	"reservation.count": "devices held", "reservation.topology": "node or any", "reservation.start": "window start", "reservation.end": "window end",
	"reservation.state": "its state", "reservation.reason": "why it was rejected or expired",
	"reservation.dev":  "the device indexes it holds (placed or later)",
	"reservation.plan": "on a draft: the placement its create is about to charge, when too large for the charge record",
	"reservation.ns":   "the resource's node size (what device ids and node ids are made from)",
	"reservation.hist": "its timeline", "reservation.hist.s": "state entered", "reservation.hist.at": "when",
	"reservation.hist.r": "why (rejected, expired, node_unreachable, replaced, disrupted)", "reservation.hist.rid": "the rollout of a disrupted entry",
	"reservation.createdAt": "when the draft was written", "reservation.updatedAt": "when its state last changed",
	"reservation.releasedBy": "tenant or window_end", "reservation.credited": "a terminal one's quota was given back",
	"reservation.bn":  "bound: the nodes that reported it bound",
	"reservation.mv":  "a move in flight: the devices it is moving onto",
	"reservation.mvt": "the move's token (who started it)", "reservation.mvf": "the devices it moved from (freed once the move is done)",
	"reservation.mvn": "moves made (bounded)", "reservation.nu": "its node_unreachable entry is written",
	"reservation.ag":      "amend generation: every binding-time write and every disrupted entry bumps it (an Amend from an older copy is refused)",
	"reservation.scr":     "on a terminal one: the nodes whose scrub of it is not written yet (it keeps its devices there, and stays due, until it is)",
	"reservation.lease":   "a draft's lease: the flow that drives it until then",
	"reservation.request": "the request's fingerprint as sent (clientToken replays)", "reservation.clientToken": "the token",
	"reservation.principal": "who created it", "reservation.invalid": "why an allowed request was invalid (NOT_FOUND or INVALID_INPUT), for replays",
	"reservation.dueShard": "due index partition", "reservation.dueAt": "when the reconciler looks at it next",
	"reservation.expiresAt": "TTL: epoch seconds after which DynamoDB deletes a terminal one",

	"nodehour.pk": "partition key: CAL#<pool>#<resource>#<yyyymmddhh>", "nodehour.sk": "sort key: N#<node>", "nodehour.kind": "item kind: nodehour",
	"nodehour.pool": "its pool", "nodehour.resource": "its resource", "nodehour.hour": "hours since the epoch", "nodehour.node": "node index",
	"nodehour.size": "devices on the node", "nodehour.ns": "the resource's node size", "nodehour.devices": "the resource's device count",
	"nodehour.fit": "`fit` LSI key: untouched devices (shifted) and a spread", "nodehour.cap": "`cap` LSI key: devices no entry holds for the whole hour",
	"nodehour.tm": "touched mask: devices some entry holds during the hour", "nodehour.n": "entries held (bounded by MaxEntriesPerNodeHour)",
	"nodehour.v": "each device's version d<i>: a placement is conditional on the versions of the devices it takes",
	"nodehour.a": "allocation entries by reservation id", "nodehour.a.m": "devices held (mask)", "nodehour.a.s": "start (Unix ms)",
	"nodehour.a.e": "end (Unix ms)", "nodehour.a.t": "the holder's tenant",
	"nodehour.expiresAt": "TTL: a day after the hour", "nodehour.off": "flagged off: no new placement (the fleet says the node is not eligible)",
	"nodehour.og": "generation of the node's flags that last wrote off",

	"hour.pk": "partition key: CAL#<pool>#<resource>#<yyyymmddhh>", "hour.sk": "sort key: #HOUR", "hour.kind": "item kind: hour",
	"hour.fit": "marker in the `fit` LSI: the hour is provisioned", "hour.cap": "marker in the `cap` LSI",
	"hour.nodes": "nodes of the resource", "hour.ns": "node size", "hour.devices": "device count", "hour.expiresAt": "TTL",
}

// expressionOnly are attributes no item type declares: update expressions
// write them.
var expressionOnly = map[string]string{
	"hour.o<j>":       "occupancy word j: bit k says node 48·j+k has a stored node-hour (occupancy.go)",
	"reservation.dis": "rollouts that disrupted it (a history entry each, once per rollout)",
}

// storedItems are the item types whose names the glossary holds.
var storedItems = map[string]any{
	"pool": poolItem{}, "poolView": poolItem{}, "quota": quotaItem{}, "reservation": reservationItem{},
	"nodehour": nodeHourItem{}, "hour": hourItem{},
}
