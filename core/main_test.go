package core

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestMain(m *testing.M) {
	defaultTimeout = 10 * time.Second
	redistest.Main(m)
}
