//go:build !race

package chaos

// raceEnabled is true under the race detector: the chaos run is timing-sensitive and long, so
// it skips itself there and runs in its own `go test ./tests/chaos/` step.
const raceEnabled = false
