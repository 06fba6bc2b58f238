package kubecluster

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Each node's processes live in a cgroup subtree of their own, /weft-kubecluster/<prefix>/<node>
// in every mounted hierarchy, the kubelet's cgroupRoot: its containerd, kubelet and kube-proxy
// (and containerd's shims, their children) in "system", its pods under "kubepods", which the
// kubelet makes (with cgroupsPerQOS; without it the kubelet names no cgroup parent and
// containerd puts every node's containers in one /k8s.io). Nodes then
// share no cgroup, what a node runs can be listed and killed as a whole, including containers
// whose shim was killed before them, and a killed run's leftovers are found by the prefix.

// cgroupBase is the directory, in every hierarchy, under which the clusters' trees are.
const cgroupBase = "weft-kubecluster"

// cgroupMounts lists the mount points of the cgroup hierarchies (v1 controllers, named v1
// hierarchies such as name=systemd, and the v2 one), from /proc/self/mountinfo.
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("listing cgroup hierarchies: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "36 35 98:0 / /mnt1 rw,noatime shared:1 - cgroup cgroup rw,cpu": the fields after
		// " - " are the type, the source and the super options.
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, typ := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(typ) < 1 || (typ[0] != "cgroup" && typ[0] != "cgroup2") {
			continue
		}
		out = append(out, fields[4])
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("listing cgroup hierarchies: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("listing cgroup hierarchies: none is mounted")
	}
	return out, nil
}

// cgroupTree is a cgroup path present in every hierarchy.
type cgroupTree struct {
	rel    string   // "/weft-kubecluster/<prefix>/<node>"
	mounts []string // the hierarchies' mount points
}

// newCgroupTree makes rel in every hierarchy.
func newCgroupTree(rel string) (*cgroupTree, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	g := &cgroupTree{rel: rel, mounts: mounts}
	for _, m := range mounts {
		if err := os.MkdirAll(filepath.Join(m, rel), 0o755); err != nil {
			return nil, fmt.Errorf("making cgroup %s: %w", rel, err)
		}
	}
	// A v1 cpuset cgroup starts with no CPUs and no memory nodes, and no process can join
	// it until they are set: each level takes its parent's.
	for _, m := range mounts {
		if _, err := os.Stat(filepath.Join(m, "cpuset.cpus")); err != nil {
			continue
		}
		dir := m
		for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
			parent := dir
			dir = filepath.Join(dir, part)
			for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
				if cur, err := os.ReadFile(filepath.Join(dir, file)); err == nil && strings.TrimSpace(string(cur)) != "" {
					continue
				}
				val, err := os.ReadFile(filepath.Join(parent, file))
				if err != nil {
					return nil, fmt.Errorf("cgroup %s: %w", rel, err)
				}
				if err := os.WriteFile(filepath.Join(dir, file), val, 0o644); err != nil {
					return nil, fmt.Errorf("cgroup %s: %w", dir, err)
				}
			}
		}
	}
	return g, nil
}

// sub is the tree's child name, made in every hierarchy.
func (g *cgroupTree) sub(name string) (*cgroupTree, error) {
	return newCgroupTree(filepath.Join(g.rel, name))
}

// join moves the process pid into the tree in every hierarchy.
func (g *cgroupTree) join(pid int) error {
	for _, m := range g.mounts {
		if err := os.WriteFile(filepath.Join(m, g.rel, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("moving process %d into cgroup %s: %w", pid, filepath.Join(m, g.rel), err)
		}
	}
	return nil
}

// pids lists the processes anywhere in the tree, in any hierarchy.
func (g *cgroupTree) pids() []int {
	seen := map[int]bool{}
	for _, m := range g.mounts {
		_ = filepath.WalkDir(filepath.Join(m, g.rel), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil // a cgroup removed meanwhile
			}
			data, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	out := make([]int, 0, len(seen))
	for pid := range seen {
		out = append(out, pid)
	}
	slices.Sort(out)
	return out
}

// remove kills every process in the tree, then removes its cgroups, deepest first.
func (g *cgroupTree) remove() error {
	if err := killAll(g.pids); err != nil {
		return fmt.Errorf("cgroup %s: %w", g.rel, err)
	}
	var errs []error
	for _, m := range g.mounts {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(m, g.rel), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		// Children before parents: the walk lists a parent first.
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := removeCgroup(dirs[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeCgroup removes an empty cgroup, which may be busy for a moment after its last process
// has died.
func removeCgroup(dir string) error {
	var err error
	for range 50 {
		err = syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("removing cgroup %s: %w", dir, err)
}

// sweepCgroups removes the cgroup trees of clusters whose underlay network namespace is gone
// (killed runs: e2e/cluster's sweep removed their namespaces, not their containers), killing
// what still runs in them.
func sweepCgroups(live func(prefix string) bool) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	stale := map[string]bool{}
	for _, m := range mounts {
		entries, _ := os.ReadDir(filepath.Join(m, cgroupBase)) // none yet: nothing to sweep
		for _, e := range entries {
			if e.IsDir() && !live(e.Name()) {
				stale[e.Name()] = true
			}
		}
	}
	var errs []error
	for p := range stale {
		g := &cgroupTree{rel: "/" + cgroupBase + "/" + p, mounts: mounts}
		if err := g.remove(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
