//go:build race

package cutover

// raceEnabled: the race detector slows the simulator about eightfold, and
// it runs no goroutine of its own to check; make test runs its full count
// without -race too.
const raceEnabled = true
