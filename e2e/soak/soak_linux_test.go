package soak

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/e2e/cluster"
)

// Environment variables of the long soak (make soak).
const (
	envDuration = "WEFT_SOAK_DURATION"  // the busy time, e.g. 30m; TestSoak skips without it
	envSeed     = "WEFT_SOAK_SEED"      // the seed; default one drawn from the clock, printed
	envBackend  = "WEFT_SOAK_BACKEND"   // vxlan (default) or host-gw
	envDual     = "WEFT_SOAK_DUALSTACK" // set (non-empty): a dual-stack network
	// envDatastore is etcd (default) or kube: weftd --kube-subnet-mgr on a kube-apiserver
	// ($WEFT_KUBE_APISERVER, or .cache/kube/bin's).
	envDatastore = "WEFT_SOAK_DATASTORE"
)

// shortSeed is the short soak's seed, fixed so that make test runs the same faults every
// time; shortFor its busy time.
const (
	shortSeed = 22
	shortFor  = 45 * time.Second
)

// TestSoakShort is the soak in make test: a fixed seed, one phase of 45 s on vxlan.
func TestSoakShort(t *testing.T) {
	soak(t, Config{Seed: shortSeed, Duration: shortFor})
}

// TestSoak is the long soak (make soak DURATION=30m SEED=... SOAK_DATASTORE=...): phases of
// three minutes, each followed by a convergence check.
func TestSoak(t *testing.T) {
	d := os.Getenv(envDuration)
	if d == "" {
		t.Skip("the long soak runs with " + envDuration + " set (make soak DURATION=30m)")
	}
	dur, err := time.ParseDuration(d)
	if err != nil {
		t.Fatalf("%s=%s: %v", envDuration, d, err)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envSeed); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%s: %v", envSeed, s, err)
		}
	}
	soak(t, Config{Seed: seed, Duration: dur, Phase: 3 * time.Minute, Backend: os.Getenv(envBackend),
		DualStack: os.Getenv(envDual) != "", Datastore: os.Getenv(envDatastore)})
}

// soak runs one soak with the binaries TestMain built and fails the test for every broken
// invariant, with the seed and the faults' history.
func soak(t *testing.T, cfg Config) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the cluster is made of network namespaces")
	}
	cfg.Weftd, cfg.CNIBin = os.Getenv(envWeftd), os.Getenv(envCNIBin)
	if cfg.Weftd == "" || cfg.CNIBin == "" {
		t.Skip("weftd or the CNI plugins missing (see TestMain's output)")
	}
	cfg.EtcdCommand = []string{os.Getenv(envDemo), "--serve-etcd"}
	rep, err := Run(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("soak report:\n%s", rep.Summary())
	if t.Failed() || len(rep.Violations) > 0 || len(rep.Problems) > 0 {
		t.Logf("the faults as they ran (seed %d):\n%s", cfg.Seed, strings.Join(rep.History, "\n"))
	}
	for _, v := range rep.Violations {
		t.Errorf("invariant broken: %s", v)
	}
	for _, p := range rep.Problems {
		t.Errorf("soak harness: %s", p)
	}
	if rep.Checks[checkUntouched] == 0 {
		t.Error("no ping run went untouched by faults: the ping invariant was never checked")
	}
	if rep.Checks[checkKeepsTraffic] == 0 {
		t.Errorf("no ping run went through weftd stopped or cut from its datastore alone: %q was never checked", checkKeepsTraffic)
	}
	if len(rep.Injected) == 0 {
		t.Error("no fault injected")
	}
	// Every fault the schedule drew ran or was skipped, and no kind drawn was always skipped
	// (a fault that cannot be injected checks nothing).
	for kind, drew := range rep.Schedule.Count() {
		ran, skipped := rep.Injected[kind], rep.Skipped[kind]
		if ran+skipped != drew {
			t.Errorf("%s: the schedule drew %d, %d ran and %d were skipped", kind, drew, ran, skipped)
		}
		if ran == 0 {
			t.Errorf("%s: drawn %d times, never injected", kind, drew)
		}
	}
}

const (
	envWeftd  = "WEFT_WEFTD"
	envCNIBin = cluster.EnvCNIBin
	envDemo   = "WEFT_DEMO" // weft-demo, whose --serve-etcd runs an etcd member
)

// TestMain builds weftd and weft-demo once and installs the CNI plugins and ping if they are
// missing. Without root nothing is prepared: the soaks skip.
func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		return m.Run()
	}
	cleanup, err := cluster.PrepareMain([]cluster.Program{
		{Env: envWeftd, Pkg: "./cmd/weftd", Race: raceEnabled},
		// The demo (only the soak's etcd members) needs no race detector.
		{Env: envDemo, Pkg: "./e2e/demo"},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	defer cleanup()
	return m.Run()
}
