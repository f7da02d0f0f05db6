package agent

import (
	"context"
	"testing"
)

// runAgent runs a until the test ends and returns once it serves: until
// the source has answered once the agent refuses connections, which a
// test dialing it at once on a loaded machine would see.
func runAgent(t *testing.T, a *Agent) {
	t.Helper()
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- a.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-a.Ready():
	case err := <-ran:
		ran <- err // for the cleanup
		t.Fatalf("agent.Run returned before serving: %v", err)
	}
}
