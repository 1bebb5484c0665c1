package fleetproto

// adopt wires the capacity service's Bindings as the fleet's Adopter: a node
// registering tells it what it holds (the wiring of shared/app).
func (w *world) adopt() { w.fleet.Adopter = w.cap.Bindings() }
