//go:build race

package agent

// raceEnabled: the race detector slows the agent's cutover simulation
// about sixfold. Under it the simulation runs a tenth of its seeds, which
// is where it checks the agent's goroutines; make test runs its full count
// without -race too.
const raceEnabled = true
