package windows

// Watchers is how many Watches run on the plane, for a test that starts several and must
// know all are registered before it makes drift.
func (p *Plane) Watchers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.watch.drift)
}
