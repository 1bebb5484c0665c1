package api

// ConsoleFunction is the web console's Lambda (shared/console): served
// under /console/ of the same API, it is no catalog method. It calls the
// methods below in process, through the gateway, with the viewer's own
// credentials: its role may do what those methods may do, and nothing
// else (the CDK app grants the union of their Actions and Indexes).
const ConsoleFunction = "console"

// ConsoleMethods are the methods the console's pages and actions call.
var ConsoleMethods = []string{
	"pools.list", "pools.get", "pools.usage", "pools.availability", "quotas.get",
	"reservations.create", "reservations.get", "reservations.list", "reservations.release",
	"nodes.get", "nodes.list", "nodes.cordon", "nodes.uncordon",
	"rollouts.list", "rollouts.get", "rollouts.nodes", "rollouts.pause", "rollouts.resume", "rollouts.abort",
	"releases.list", "releases.log", "releases.prove",
}
