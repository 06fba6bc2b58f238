package daemon

import (
	"fmt"
	"net/http"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"time"
)

// maxCPUProfile bounds a CPU profile's length: under the health endpoints' write timeout.
const maxCPUProfile = 25 * time.Second

// serveProfile writes one of Go's profiles (--debug-pprof), in the format `go tool pprof`
// reads: /debug/pprof/profile?seconds=N is a CPU profile of the next N seconds (default 5),
// /debug/pprof/trace?seconds=N an execution trace of them (`go tool trace`),
// /debug/pprof/heap (?gc=1: after a collection), allocs, goroutine and the others that
// runtime/pprof keeps by their names. It is written on runtime/pprof rather than by
// importing net/http/pprof, whose import registers its handlers on http.DefaultServeMux.
func serveProfile(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if name == "profile" || name == "trace" {
		d := 5 * time.Second
		if s := r.FormValue("seconds"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || time.Duration(n)*time.Second > maxCPUProfile {
				http.Error(w, fmt.Sprintf("seconds=%q: want 1 to %d", s, int(maxCPUProfile.Seconds())), http.StatusBadRequest)
				return
			}
			d = time.Duration(n) * time.Second
		}
		start, stop := pprof.StartCPUProfile, pprof.StopCPUProfile
		if name == "trace" {
			start, stop = trace.Start, trace.Stop
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		if err := start(w); err != nil {
			http.Error(w, name+": "+err.Error(), http.StatusConflict)
			return
		}
		select {
		case <-time.After(d):
		case <-r.Context().Done():
		}
		stop()
		return
	}
	p := pprof.Lookup(name)
	if p == nil {
		http.Error(w, fmt.Sprintf("no profile %q", name), http.StatusNotFound)
		return
	}
	if r.FormValue("gc") == "1" {
		runtime.GC()
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_ = p.WriteTo(w, 0)
}
