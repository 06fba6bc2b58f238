package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/weftnet/weft/e2e/cluster"
)

// Environment variables that carry the binaries from TestMain to the tests, and that a
// caller may set to use prebuilt ones.
const (
	envWeftd   = "WEFT_WEFTD"      // the weftd binary; built from ./cmd/weftd when unset
	envCNIBin  = cluster.EnvCNIBin // the CNI plugin directory; see cluster.PrepareCNI
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
	cleanup, err := cluster.PrepareMain([]cluster.Program{
		{Env: envWeftd, Pkg: "./cmd/weftd", Race: raceEnabled},
		{Env: envWeftCNI, Pkg: "./cmd/weft", Race: raceEnabled},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer cleanup()
	return m.Run()
}
