package atomicfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// leftovers returns the names of temporary files Write may have left in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var tmps []string
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			tmps = append(tmps, e.Name())
		}
	}
	return tmps
}

func TestWriteCreatesAndReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "subnet.env")

	for _, content := range []string{"first content\n", "second, longer content\n", "3\n", ""} {
		if err := Write(path, []byte(content), 0o644); err != nil {
			t.Fatalf("Write(%q): %v", content, err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != content {
			t.Fatalf("content = %q, want %q", got, content)
		}
		if tmps := leftovers(t, dir); len(tmps) != 0 {
			t.Fatalf("temporary files left behind: %v", tmps)
		}
	}
}

func TestWriteCreatesParentDirs(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run", "flannel", "subnet.env")
	if err := Write(path, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "x" {
		t.Fatalf("content = %q, want %q", got, "x")
	}
	if runtime.GOOS != "windows" {
		fi, err := os.Stat(filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.IsDir() {
			t.Fatalf("%s is not a directory", filepath.Dir(path))
		}
	}
}

func TestWritePerm(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("windows has no unix permission bits")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, perm := range []os.FileMode{0o600, 0o644, 0o640, 0o600} {
		if err := Write(path, []byte("data"), perm); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != perm {
			t.Errorf("mode = %v, want %v", got, perm)
		}
	}
}

func TestWriteFailsOnDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "taken")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	// A file inside makes the rename fail on every platform.
	if err := os.WriteFile(filepath.Join(path, "inside"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}

	err := Write(path, []byte("data"), 0o644)
	if err == nil {
		t.Fatal("Write over a directory succeeded")
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name the path %q", err, path)
	}
	if tmps := leftovers(t, dir); len(tmps) != 0 {
		t.Fatalf("temporary files left behind: %v", tmps)
	}
	fi, statErr := os.Stat(path)
	if statErr != nil || !fi.IsDir() {
		t.Fatalf("directory at path was disturbed: %v, %v", fi, statErr)
	}
	if got, _ := os.ReadFile(filepath.Join(path, "inside")); string(got) != "keep" {
		t.Fatalf("directory content was disturbed: %q", got)
	}
}

func TestWriteFailsWhenParentIsFile(t *testing.T) {
	dir := t.TempDir()
	parent := filepath.Join(dir, "file")
	if err := os.WriteFile(parent, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Write(filepath.Join(parent, "child"), []byte("data"), 0o644)
	if err == nil {
		t.Fatal("Write below a regular file succeeded")
	}
	if got, _ := os.ReadFile(parent); string(got) != "old" {
		t.Fatalf("file was disturbed: %q", got)
	}
	if tmps := leftovers(t, dir); len(tmps) != 0 {
		t.Fatalf("temporary files left behind: %v", tmps)
	}
}

func TestWriteFailsOnDirectoryPath(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir+string(filepath.Separator), []byte("data"), 0o644); err == nil {
		t.Fatal("Write to a path ending in a separator succeeded")
	}
}

func TestWriteErrorWraps(t *testing.T) {
	dir := t.TempDir()
	parent := filepath.Join(dir, "file")
	if err := os.WriteFile(parent, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := Write(filepath.Join(parent, "child"), nil, 0o644)
	var pathErr *os.PathError
	if !errors.As(err, &pathErr) {
		t.Fatalf("error %v (%T) does not wrap an *os.PathError", err, err)
	}
}

// TestWriteConcurrentReaders checks that a reader never sees a partial or
// mixed file while the file is being replaced over and over.
func TestWriteConcurrentReaders(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "subnet.env")
	contents := [][]byte{
		[]byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"),
		bytes.Repeat([]byte("FLANNEL_IPV6_NETWORK=fd00:10:244::/56\n"), 300),
	}
	if err := Write(path, contents[0], 0o644); err != nil {
		t.Fatal(err)
	}

	const writes = 200
	done := make(chan struct{})
	var wg sync.WaitGroup
	var writeErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := 0; i < writes; i++ {
			if err := Write(path, contents[i%2], 0o644); err != nil {
				writeErr = err
				return
			}
		}
	}()

	reads, readErrs := 0, 0
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true // one last read after the writer finished
		default:
		}
		got, err := os.ReadFile(path)
		if err != nil {
			// On windows opening a file that is being renamed over can
			// fail transiently; elsewhere the path must always exist.
			if runtime.GOOS == "windows" {
				readErrs++
				continue
			}
			t.Fatalf("read %d: %v", reads, err)
		}
		reads++
		if !bytes.Equal(got, contents[0]) && !bytes.Equal(got, contents[1]) {
			t.Fatalf("read %d saw %d bytes matching neither content: %q", reads, len(got), got)
		}
	}
	wg.Wait()
	if writeErr != nil {
		t.Fatalf("writer: %v", writeErr)
	}
	t.Logf("%d writes, %d reads, %d transient read errors", writes, reads, readErrs)
	if tmps := leftovers(t, dir); len(tmps) != 0 {
		t.Fatalf("temporary files left behind: %v", tmps)
	}
}
