//go:build race

package e2e

// raceEnabled: the tests run with the race detector, so weftd is built with it too, and a
// data race in weftd under real traffic fails the test that meets it.
const raceEnabled = true
