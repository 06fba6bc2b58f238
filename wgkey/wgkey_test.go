package wgkey

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLoad: a missing key file is made, readable by root alone, holding the key in base64 as
// flanneld writes it; the next Load reads the same key back; a file holding no key is refused.
func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flannel", "wgkey")
	k, created, err := Load(path)
	if err != nil || !created || k.IsZero() {
		t.Fatalf("Load: %v %v %v", k, created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o400 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	b, _ := os.ReadFile(path)
	if string(b) != k.String() {
		t.Errorf("file holds %q, want %q", b, k.String())
	}
	again, created, err := Load(path)
	if err != nil || created || again != k {
		t.Errorf("second Load: %v %v %v, want %v", again, created, err, k)
	}
	if k[0]&7 != 0 || k[31]&128 != 0 || k[31]&64 == 0 {
		t.Errorf("key %v is not clamped", k)
	}
	bad := filepath.Join(t.TempDir(), "wgkey")
	if err := os.WriteFile(bad, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(bad); err == nil {
		t.Error("a file holding no key was read")
	}
	if p := Path(func(string) (string, bool) { return "", false }); p != DefaultPath {
		t.Errorf("Path without WIREGUARD_KEY_FILE: %s", p)
	}
	if p := Path(func(k string) (string, bool) { return "/k", k == "WIREGUARD_KEY_FILE" }); p != "/k" {
		t.Errorf("Path with WIREGUARD_KEY_FILE=/k: %s", p)
	}
}
