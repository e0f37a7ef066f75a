//go:build race

package conformance

// raceEnabled is true when the tests run under the race detector; the binary is then built with
// -race too.
const raceEnabled = true
