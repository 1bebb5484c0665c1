// Package fleetproto is the fleet protocol simulation (docs/fleet.md, "The
// fleet protocol simulation"): a seeded, deterministic exploration of the
// real capacity, fleet and rollout services on dynalite, in which every
// store call is a scheduling point. The simulation lives in its tests:
//
//	go test ./test/fleetproto -run TestFleetProtocolSimulation
//
// BC_FLEETPROTO_SEEDS=n runs seeds 1..n, BC_FLEETPROTO_SEED=k replays one.
package fleetproto
