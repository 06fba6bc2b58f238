package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/weftnet/weft/internal/buildinfo"
)

// cniPlugins are the plugin binaries AddPod runs.
func cniPlugins() []string { return []string{"bridge", "host-local"} }

// MissingCNIPlugins returns the CNI plugins AddPod needs that dir does not hold as
// executables.
func MissingCNIPlugins(dir string) []string {
	var missing []string
	for _, p := range cniPlugins() {
		st, err := os.Stat(filepath.Join(dir, p))
		if err != nil || st.IsDir() || st.Mode().Perm()&0o111 == 0 {
			missing = append(missing, p)
		}
	}
	return missing
}

// RepoRoot finds the weft repository that holds the working directory: the nearest parent
// with a go.mod and tools/install-cni.sh.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for {
		if fileExists(filepath.Join(dir, "go.mod")) && fileExists(filepath.Join(dir, "tools", "install-cni.sh")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("finding the repository root: no parent directory has go.mod and tools/install-cni.sh")
		}
		dir = parent
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// PrepareCNI returns the directory of the CNI plugins for tests: $WEFT_CNI_BIN (EnvCNIBin) if set, else
// <repo>/.cache/cni/bin, where tools/install-cni.sh installs them first if any is missing
// (it needs the Go toolchain and the module proxy, once).
func PrepareCNI(repo string) (string, error) {
	if dir := os.Getenv(EnvCNIBin); dir != "" {
		if missing := MissingCNIPlugins(dir); len(missing) > 0 {
			return "", fmt.Errorf("WEFT_CNI_BIN=%s lacks the CNI plugins %s", dir, strings.Join(missing, ", "))
		}
		return dir, nil
	}
	dir := filepath.Join(repo, ".cache", "cni", "bin")
	if len(MissingCNIPlugins(dir)) == 0 {
		return dir, nil
	}
	script := filepath.Join(repo, "tools", "install-cni.sh")
	out, err := exec.Command(script, dir).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("installing the CNI plugins with %s %s: %w: %s", script, dir, err, strings.TrimSpace(string(out)))
	}
	if missing := MissingCNIPlugins(dir); len(missing) > 0 {
		return "", fmt.Errorf("%s %s did not install %s", script, dir, strings.Join(missing, ", "))
	}
	return dir, nil
}

// PreparePing makes sure iputils ping is installed, running tools/install-e2e-deps.sh (which
// uses apt-get) if it is not.
func PreparePing(repo string) error {
	if out, err := exec.Command("ping", "-V").CombinedOutput(); err == nil && strings.Contains(string(out), "iputils") {
		return nil
	}
	script := filepath.Join(repo, "tools", "install-e2e-deps.sh")
	out, err := exec.Command(script).CombinedOutput()
	if err != nil {
		return fmt.Errorf("installing iputils ping with %s: %w: %s", script, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Build builds the Go package pkg of the repository (such as "./cmd/weftd") into dir, with
// weft's build tags (buildinfo.Tags) and the race detector if race (the tests' own setting, so that a data race in the daemon fails
// them too), and returns the binary's path.
func Build(repo, dir, pkg string, race bool) (string, error) {
	bin := filepath.Join(dir, filepath.Base(pkg))
	start := time.Now()
	args := []string{"build", "-tags=" + buildinfo.Tags, "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s (go %s in %s): %w\n%s", pkg, strings.Join(cmd.Args[1:], " "), repo, err, out)
	}
	fmt.Fprintf(os.Stderr, "built %s (race detector: %v) in %v\n", pkg, race, time.Since(start).Round(time.Millisecond))
	return bin, nil
}

// EnvCNIBin names the CNI plugin directory that PrepareMain finds (see PrepareCNI) for the
// tests, or that a caller sets to use its own.
const EnvCNIBin = "WEFT_CNI_BIN"

// Program is a binary a test package's TestMain builds from the repository's package Pkg,
// with the race detector if Race, unless the environment variable Env already names one.
// The tests find it in Env.
type Program struct {
	Env, Pkg string
	Race     bool
}

// PrepareMain readies a test package of clusters, as root, before its tests run: iputils
// ping, the CNI plugins (their directory in EnvCNIBin; a failure there is only printed, and
// each test that needs them skips with it), and progs built into a temporary directory,
// which cleanup removes. A program that does not build is an error, not a reason to skip.
func PrepareMain(progs []Program) (cleanup func(), err error) {
	repo, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	if err := PreparePing(repo); err != nil {
		return nil, err
	}
	if dir, err := PrepareCNI(repo); err == nil {
		os.Setenv(EnvCNIBin, dir)
	} else {
		fmt.Fprintln(os.Stderr, err)
	}
	tmp, err := os.MkdirTemp("", "weft-e2e-bin-")
	if err != nil {
		return nil, err
	}
	cleanup = func() { os.RemoveAll(tmp) }
	for _, p := range progs {
		if os.Getenv(p.Env) != "" {
			continue
		}
		bin, err := Build(repo, tmp, p.Pkg, p.Race)
		if err != nil {
			cleanup()
			return nil, err
		}
		os.Setenv(p.Env, bin)
	}
	return cleanup, nil
}
