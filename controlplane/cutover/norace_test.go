//go:build !race

package cutover

const raceEnabled = false
