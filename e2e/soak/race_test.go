//go:build race

package soak

// raceEnabled: the test runs with the race detector, so weftd is built with it too, and a
// data race the faults provoke in weftd fails the soak.
const raceEnabled = true
