// Package atomicfile replaces files atomically, so that a concurrent reader
// (for example the CNI plugin reading subnet.env on every pod start) sees
// either the complete old content or the complete new content, never a
// partially written file.
package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

const (
	// renameAttempts and renameDelay bound the retries of a rename on
	// windows, where it fails while another process holds the target open.
	renameAttempts = 5
	renameDelay    = 20 * time.Millisecond
)

// Write replaces the file at path with data so that a reader sees either the
// old content or the new, never a mix: it writes a temporary file in the same
// directory, sets perm on it (regardless of the umask), fsyncs and closes it,
// renames it over path and then fsyncs the directory (except on windows, where
// directories cannot be synced). Missing parent directories are created with
// mode 0755.
//
// On any error before the rename the temporary file is removed and path is
// left untouched; an error syncing the directory after the rename means the
// new content is in place but may not survive a crash.
// On windows a failing rename is retried a few times, since it fails
// transiently while a reader holds the file open.
func Write(path string, data []byte, perm os.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if base == "" {
		return fmt.Errorf("atomicfile: write %q: path names a directory", path)
	}
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("atomicfile: create parent directory of %q: %w", path, err)
	}

	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("atomicfile: create temporary file for %q: %w", path, err)
	}
	tmpName := tmp.Name()
	closed, renamed := false, false
	defer func() {
		if err != nil && !renamed {
			if !closed {
				_ = tmp.Close()
			}
			_ = os.Remove(tmpName)
		}
	}()

	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("atomicfile: write temporary file %q for %q: %w", tmpName, path, err)
	}
	// CreateTemp uses mode 0600; Chmod sets the exact mode, unaffected by umask.
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("atomicfile: chmod temporary file %q for %q to %v: %w", tmpName, path, perm, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("atomicfile: sync temporary file %q for %q: %w", tmpName, path, err)
	}
	closed = true
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("atomicfile: close temporary file %q for %q: %w", tmpName, path, err)
	}

	if err := rename(tmpName, path); err != nil {
		return fmt.Errorf("atomicfile: rename %q to %q: %w", tmpName, path, err)
	}
	renamed = true

	if runtime.GOOS != "windows" {
		if err := syncDir(dir); err != nil {
			// The new content is in place; only its durability is in doubt.
			return fmt.Errorf("atomicfile: sync directory %q after replacing %q: %w", dir, path, err)
		}
	}
	return nil
}

// rename renames oldpath to newpath, retrying on windows where a rename over
// a file that another process holds open fails transiently.
func rename(oldpath, newpath string) error {
	err := os.Rename(oldpath, newpath)
	if runtime.GOOS != "windows" {
		return err
	}
	for i := 1; err != nil && i < renameAttempts; i++ {
		if isNotRetryable(err) {
			break
		}
		time.Sleep(renameDelay)
		err = os.Rename(oldpath, newpath)
	}
	return err
}

// isNotRetryable reports errors that a retry cannot cure.
func isNotRetryable(err error) bool {
	return errors.Is(err, os.ErrNotExist)
}

// syncDir fsyncs the directory dir so that a rename in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return err
	}
	return d.Close()
}
