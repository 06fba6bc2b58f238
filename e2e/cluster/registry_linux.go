package cluster

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// registryDir holds one record per live cluster. It is on tmpfs, so a reboot, which also
// forgets every namespace, forgets the records too.
const registryDir = "/run/weft-e2e"

// isGeneratedPrefix reports whether p has the shape of the prefixes New picks by itself
// ("wf" and four letters or digits). The sweep removes clusters of that shape that no record
// claims: the record is written before the first namespace, so such a cluster is a leftover
// whose record was lost.
func isGeneratedPrefix(p string) bool {
	return len(p) == 6 && strings.HasPrefix(p, "wf") && isName(p)
}

// isName reports whether s may be a prefix, a node name or a pod name: short, because they
// end up in namespace and interface names, lower-case letters and digits only, and so free
// of '-', which separates them.
func isName(s string) bool {
	if len(s) == 0 || len(s) > 10 {
		return false
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// record is what the registry keeps about a cluster.
type record struct {
	Prefix string `json:"prefix"`
	// PID and Start identify the owning process; Start (its start time in clock ticks
	// since boot) tells a reused PID apart.
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
	Dir   string `json:"dir"`
	// Keep marks a cluster left running on purpose (the demo's --keep): no sweep touches
	// it; Teardown removes it.
	Keep bool `json:"keep"`
}

func recordPath(prefix string) string { return filepath.Join(registryDir, prefix+".json") }

// claimRecord writes r only if no record of that prefix exists, so that two processes never
// own one prefix. The record appears whole (a hard link of a finished file), so a sweep in
// another process never reads a half-written one and takes the prefix for unclaimed.
func claimRecord(r record) error {
	if err := os.MkdirAll(registryDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", registryDir, err)
	}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encoding registry record of %s: %w", r.Prefix, err)
	}
	tmp, err := os.CreateTemp(registryDir, r.Prefix+".*.tmp")
	if err != nil {
		return fmt.Errorf("writing registry record of %s: %w", r.Prefix, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing registry record of %s: %w", r.Prefix, err)
	}
	// Unlike a rename, a link fails if the name exists.
	if err := os.Link(tmp.Name(), recordPath(r.Prefix)); err != nil {
		return fmt.Errorf("claiming prefix %s: %w", r.Prefix, err)
	}
	return nil
}

func readRecord(prefix string) (record, error) {
	data, err := os.ReadFile(recordPath(prefix))
	if err != nil {
		return record{}, fmt.Errorf("reading registry record of %s: %w", prefix, err)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return record{}, fmt.Errorf("parsing registry record %s: %w", recordPath(prefix), err)
	}
	return r, nil
}

// processStart returns the start time of a process in clock ticks since boot (field 22 of
// /proc/PID/stat).
func processStart(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading process %d: %w", pid, err)
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("parsing /proc/%d/stat: no ')'", pid)
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state), so field 22 is fields[19].
	if len(fields) < 20 {
		return 0, fmt.Errorf("parsing /proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	start, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parsing start time in /proc/%d/stat: %w", pid, err)
	}
	return start, nil
}

// ownerAlive reports whether the process that wrote r still runs.
func ownerAlive(r record) bool {
	start, err := processStart(r.PID)
	return err == nil && start == r.Start
}

// newRecord is the record of a cluster owned by this process.
func newRecord(prefix, dir string, keep bool) (record, error) {
	pid := os.Getpid()
	start, err := processStart(pid)
	if err != nil {
		return record{}, err
	}
	return record{Prefix: prefix, PID: pid, Start: start, Dir: dir, Keep: keep}, nil
}

// randomPrefix picks a prefix of the generated shape.
func randomPrefix() (string, error) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("picking a cluster prefix: %w", err)
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "wf" + string(b), nil
}

// prefixOf returns the prefix part of a namespace name made by this package.
func prefixOf(ns string) string {
	p, _, _ := strings.Cut(ns, "-")
	return p
}

// Sweep removes what earlier runs left behind: clusters whose owning process is gone and
// that were not kept on purpose, and namespaces of the generated shape that no record
// claims. It returns the prefixes it removed. New calls it; clusters of live processes,
// including other test binaries running at the same time, are left alone.
func Sweep() ([]string, error) {
	stale := map[string]bool{}
	claimed := map[string]bool{}
	entries, err := os.ReadDir(registryDir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("listing %s: %w", registryDir, err)
	}
	for _, e := range entries {
		prefix, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			// The temporary file of a claim interrupted by a kill; a live claim takes
			// microseconds.
			if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), ".tmp") &&
				time.Since(info.ModTime()) > time.Minute {
				_ = os.Remove(filepath.Join(registryDir, e.Name())) // someone else may have
			}
			continue
		}
		claimed[prefix] = true
		r, err := readRecord(prefix)
		if err != nil {
			// A half-written record of a killed run; the namespaces decide below.
			claimed[prefix] = false
			continue
		}
		if !r.Keep && !ownerAlive(r) {
			stale[prefix] = true
		}
	}
	names, err := listNetns()
	if err != nil {
		return nil, err
	}
	// The underlay namespace is made first and removed last, so every leftover of this
	// package has one; requiring it spares namespaces that merely look like ours.
	for _, ns := range names {
		p := prefixOf(ns)
		if ns == p+"-"+underlayName && isGeneratedPrefix(p) && !claimed[p] {
			stale[p] = true
		}
	}
	var removed, errs []string
	for p := range stale {
		if err := teardown(p, false); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		removed = append(removed, p)
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("sweeping stale clusters: %s", strings.Join(errs, "; "))
	}
	return removed, nil
}

// Teardown removes a cluster by its prefix: every process in its namespaces, the
// namespaces, its directory and its record. It is for clusters left running with Keep (the
// demo's --teardown), and refuses a cluster whose owner still runs and did not keep it.
func Teardown(prefix string) error {
	if !isName(prefix) {
		return fmt.Errorf("tearing down cluster %q: not a cluster prefix", prefix)
	}
	r, err := readRecord(prefix)
	if err == nil && !r.Keep && ownerAlive(r) && r.PID != os.Getpid() {
		return fmt.Errorf("tearing down cluster %s: process %d still owns it", prefix, r.PID)
	}
	return teardown(prefix, true)
}

// teardown removes the cluster's namespaces (with their processes) and its record, and its
// directory too if removeDir; it keeps going past errors so that one stuck namespace does
// not leave the others behind.
func teardown(prefix string, removeDir bool) error {
	var errs []error
	names, err := listNetns()
	if err != nil {
		errs = append(errs, err)
	}
	// Pods and nodes first, the underlay (with etcd) last, so that no weftd sees etcd
	// vanish while it still runs.
	var ul string
	for _, ns := range names {
		if prefixOf(ns) != prefix {
			continue
		}
		if ns == prefix+"-"+underlayName {
			ul = ns
			continue
		}
		if err := destroyNetns(ns); err != nil {
			errs = append(errs, err)
		}
	}
	if ul != "" {
		if err := destroyNetns(ul); err != nil {
			errs = append(errs, err)
		}
	}
	if r, err := readRecord(prefix); err == nil && removeDir && r.Dir != "" {
		if err := os.RemoveAll(r.Dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", r.Dir, err))
		}
	}
	if err := os.Remove(recordPath(prefix)); err != nil && !os.IsNotExist(err) {
		errs = append(errs, fmt.Errorf("removing registry record: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tearing down cluster %s: %w", prefix, err)
	}
	return nil
}
