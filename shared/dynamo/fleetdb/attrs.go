package fleetdb

// attributes is the glossary of this store's items: what every stored
// attribute means, by item and path (a nested record's names under its
// parent's). A node item is written by every heartbeat, so its names stay
// short (a write is billed by the item's size), and this is the one place
// each is explained; TestAttributesDocumented holds every item type's
// names to it.
var attributes = map[string]string{
	"node.pk": "partition key: POOL#<poolId>", "node.sk": "sort key: NODE#<resource>#<index>", "node.kind": "item kind: node",
	"node.ssk":    "`bystate` LSI key: <state>#<resource>#<index> (nodes.list by state)",
	"node.psk":    "`bypool` LSI key while the node is out of service (counted by rollouts' budgets)",
	"node.poolId": "its pool", "node.nodeId": "<resource>-node-<index>", "node.resource": "its resource", "node.idx": "its index",
	"node.ns": "the resource's node size", "node.owner": "the pool's owner", "node.platform": "os/arch[/variant]",
	"node.keyId": "hex SHA-256 of its key's PKIX DER", "node.pub": "its public key (PEM)", "node.state": "registered, ready, unhealthy or unreachable",
	"node.createdAt": "when it was registered", "node.counter": "the last accepted report's counter (strictly rising)",
	"node.last":    "when the last report was accepted",
	"node.running": "the release it runs", "node.running.v": "version", "node.running.s": "sequence",
	"node.install": "its last install report", "node.install.v": "version", "node.install.st": "installing, installed or failed", "node.install.r": "why it failed",
	"node.health": "its last health report", "node.health.e": "devices expected", "node.health.v": "devices visible",
	"node.health.c": "checks", "node.health.c.n": "name", "node.health.c.ok": "passed", "node.health.c.d": "detail",
	"node.oc": "the operator's cordon", "node.oc.by": "operator", "node.oc.r": "reason", "node.oc.rid": "unused on an operator's cordon", "node.oc.at": "when",
	"node.rc": "a rollout's cordon", "node.rc.by": "rollout", "node.rc.r": "reason", "node.rc.rid": "the rollout", "node.rc.at": "when",
	"node.b":   "bind entries by reservation id: what the node is told to bind or unbind (bounded by MaxBindings)",
	"node.b.t": "the holder's tenant", "node.b.m": "devices (mask)", "node.b.s": "window start (Unix ms)", "node.b.e": "window end (Unix ms)",
	"node.b.a": "bind or unbind", "node.b.mv": "the reservation's move count the entry was written for",
	"node.nb": "bind entries held", "node.rep": "the node's last reported state of each binding (bound, unbound, failed)",
	"node.fg":    "flags generation: every change of what the node's flags want bumps it",
	"node.flGen": "the generation the node-hour flags were last written for", "node.fl": "the flags say off",
	"node.flTo": "hours (since the epoch) the flags were written up to",
	"node.bv":   "bind version: every write of the bind entries bumps it (optimistic)",
	"node.adp":  "adopted: the reservations placed while it was unmanaged were told to it",
	"node.tgt":  "a rollout's target release", "node.tgt.v": "version", "node.tgt.s": "sequence", "node.tgt.rid": "the rollout",
	"node.floor": "the lowest release sequence it may install",
	"node.log":   "the release log checkpoint its last report carried", "node.log.s": "size", "node.log.r": "root (base64)",
	"node.lsv": "the first reported checkpoint the log never had (a split view)", "node.lsv.s": "size", "node.lsv.r": "root", "node.lsv.at": "when",

	"fleet.pk": "partition key: POOL#<poolId>", "fleet.sk": "sort key: #FLEET", "fleet.kind": "item kind: fleet", "fleet.poolId": "the pool",
	"fleet.dueShard": "due index partition", "fleet.dueAt": "when the pool is swept next",
	"fleet.baseline": "the pool's baseline release", "fleet.baseline.v": "version", "fleet.baseline.s": "sequence",
	"fleet.baseline.rid": "the rollout that set it",
	"fleet.dis":          "since when the pool's nodes went silent together (a mass silence held)",
	"fleet.rsm":          "when that hold ended (nodes still silent are marked gradually from then)",
}

// storedItems are the item types whose names the glossary holds.
var storedItems = map[string]any{"node": nodeItem{}, "fleet": fleetItem{}}
