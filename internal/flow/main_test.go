package flow

import (
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestMain stops the redis-servers the tests started.
func TestMain(m *testing.M) { redistest.Main(m) }
