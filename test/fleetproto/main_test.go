package fleetproto

import (
	"testing"

	"github.com/bettercompute/control-plane/shared/devstack"
)

// TestMain shares one local stack (dynalite) across the package; every seed
// gets its own table.
func TestMain(m *testing.M) { devstack.Main(m) }
