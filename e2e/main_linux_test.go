package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/weftnet/weft/e2e/cluster"
)

// Environment variables that carry the binaries from TestMain to the tests, and that a
// caller may set to use prebuilt ones.
const (
	envWeftd   = "WEFT_WEFTD"      // the weftd binary; built from ./cmd/weftd when unset
	envCNIBin  = "WEFT_CNI_BIN"    // the CNI plugin directory; see cluster.PrepareCNI
	envWeftCNI = "WEFT_CNI_PLUGIN" // the weft CNI plugin binary; built from ./cmd/weft when unset
)

// TestMain builds weftd and the weft CNI plugin once for all tests and installs the CNI
// plugins if they are missing. Without root nothing is prepared: every test skips.
func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if os.Geteuid() != 0 {
		return m.Run()
	}
	repo, err := cluster.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if err := cluster.PreparePing(repo); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	// A failure here is reported by each test as a skip; the tests call PrepareCNI again,
	// which is quick once the plugins are there.
	if dir, err := cluster.PrepareCNI(repo); err == nil {
		os.Setenv(envCNIBin, dir)
	} else {
		fmt.Fprintln(os.Stderr, "e2e:", err)
	}

	tmp, err := os.MkdirTemp("", "weft-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	for _, b := range []struct{ env, name string }{{envWeftd, "weftd"}, {envWeftCNI, "weft"}} {
		if os.Getenv(b.env) != "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(repo, "cmd", b.name)); os.IsNotExist(err) {
			continue
		}
		bin, err := cluster.Build(repo, tmp, "./cmd/"+b.name, raceEnabled)
		if err != nil {
			// A binary that does not compile is a failure, not a reason to skip.
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		os.Setenv(b.env, bin)
	}
	return m.Run()
}
