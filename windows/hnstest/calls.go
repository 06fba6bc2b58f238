package hnstest

import (
	"maps"
	"sync"
)

// calls counts the calls made to a fake, reads and refused requests too, by method: a test
// can check that a step listed nothing.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) count(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[method]++
}

// Calls returns the calls counted since the last ResetCalls, by method.
func (c *calls) Calls() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// ResetCalls forgets the counted calls.
func (c *calls) ResetCalls() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.n)
}
