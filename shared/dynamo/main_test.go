package dynamo_test

import (
	"testing"

	"github.com/bettercompute/control-plane/shared/devstack"
)

// TestMain shares one local stack (dynalite, local-kms) across the package.
func TestMain(m *testing.M) { devstack.Main(m) }
