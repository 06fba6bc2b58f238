package subnet

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestFlannelSource reads the source of the flanneld that tools/flannel pins for every key of
// net-conf.json it reads — the fields of its subnet.Config, the struct its parseBackendType
// decodes the Backend object into, and those each registered backend decodes it into, on
// Linux and on Windows — and fails on each that flannelKeys lacks or that weft ignores, and on
// each that flannelKeys lists and flanneld no longer reads: so that the next flannel release's
// keys are caught when tools/flannel moves to it. Backends' structs are local to their
// functions, out of reflection's reach: hence the source.
func TestFlannelSource(t *testing.T) {
	dir, err := flannelModule(filepath.Join("..", "tools", "flannel"))
	if err != nil {
		t.Skipf("no flannel source to compare with: %v", err)
	}
	src, err := readFlannelKeys(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The reading is only as good as its patterns: a few keys every flannel has prove them.
	for _, k := range []string{"/Network", "/Backend", "*/Type", "vxlan/VNI", "vxlan/MacPrefix", "host-gw/DNSServerList", "wireguard/PSK"} {
		if !src[strings.ToLower(k)] {
			t.Fatalf("%s not found in %s: its source changed shape; read %v", k, dir, slices.Sorted(maps.Keys(src)))
		}
	}
	t.Logf("flanneld reads %v", slices.Sorted(maps.Keys(src)))
	ours := map[string]bool{}
	for _, k := range flannelKeys() {
		ours[strings.ToLower(k.typ+"/"+k.key)] = true
	}
	for k := range src {
		if !ours[k] {
			t.Errorf("flanneld reads %s (type/key), flannelKeys lacks it: decide what weft does with it", k)
		}
	}
	for k := range ours {
		if !src[k] {
			t.Errorf("flannelKeys lists %s (type/key), which flanneld no longer reads", k)
		}
	}
	// Whatever the table says, weft must not ignore a key flanneld reads: set to null, each
	// is taken (as absent), or refused with its name or its backend type's.
	for k := range src {
		typ, key, _ := strings.Cut(k, "/")
		fk := flannelKey{typ: typ, key: key, value: "null", rest: `"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}`}
		if key == "" {
			fk.key, fk.value = "Type", strconv.Quote(typ)
		}
		conf := fk.conf(fk.key)
		c, err := ParseConfig([]byte(conf))
		var ce *ConfigError
		switch {
		case err == nil && len(c.Ignored) > 0:
			t.Errorf("%s: weft ignores %v", conf, c.Ignored)
		case err != nil && !errors.As(err, &ce):
			t.Errorf("%s: %v", conf, err)
		case err != nil && !strings.EqualFold(ce.Key, key) && !strings.EqualFold(ce.Key, "Backend."+key) && ce.Key != "Backend.Type":
			t.Errorf("%s: %v names neither the key nor the backend type", conf, err)
		}
	}
}

// flannelModule returns the directory of the flannel module that the go.mod in modDir pins,
// downloading it if need be.
func flannelModule(modDir string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/flannel-io/flannel")
	cmd.Dir = modDir
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); jerr != nil || m.Dir == "" {
		return "", fmt.Errorf("go mod download in %s: %v %s %s", modDir, err, m.Error, out)
	}
	return m.Dir, nil
}

// readFlannelKeys returns the keys flannel's source in dir reads from net-conf.json, as
// "type/key" lower-cased: type "" for the top level, "*" for every backend type, "type/" for
// a backend type that reads no key of its own.
func readFlannelKeys(dir string) (map[string]bool, error) {
	keys := map[string]bool{}
	top, err := parseGoDir(filepath.Join(dir, "pkg", "subnet"))
	if err != nil {
		return nil, err
	}
	cfg := top.structs["Config"]
	if cfg == nil {
		return nil, fmt.Errorf("no type Config in %s/pkg/subnet", dir)
	}
	for _, k := range jsonKeys(cfg, nil) {
		keys["/"+k] = true
	}
	// Type is read by parseBackendType from whatever the Backend object holds.
	for _, fn := range top.funcs {
		if fn.Name.Name == "parseBackendType" {
			for _, k := range unmarshalledKeys(fn, top, func(ast.Expr) bool { return true }) {
				keys["*/"+k] = true
			}
		}
	}
	dirs, err := os.ReadDir(filepath.Join(dir, "pkg", "backend"))
	if err != nil {
		return nil, err
	}
	// A backend decodes its keys from config.Backend (config being the *subnet.Config its
	// RegisterNetwork gets), or from a json.RawMessage parameter named config it is passed.
	fromBackend := func(e ast.Expr) bool {
		s := exprString(e)
		return s == "config.Backend" || s == "config"
	}
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		pkg, err := parseGoDir(filepath.Join(dir, "pkg", "backend", d.Name()))
		if err != nil {
			return nil, err
		}
		if len(pkg.registers) == 0 {
			continue
		}
		if len(pkg.registers) > 1 {
			return nil, fmt.Errorf("pkg/backend/%s registers several backend types: %v", d.Name(), pkg.registers)
		}
		typ := pkg.registers[0]
		keys[typ+"/"] = true
		for _, fn := range pkg.funcs {
			for _, k := range unmarshalledKeys(fn, pkg, fromBackend) {
				keys[typ+"/"+k] = true
				delete(keys, typ+"/")
			}
		}
	}
	return keys, nil
}

// goPkg is what readFlannelKeys needs of one directory of Go source, every OS's files.
type goPkg struct {
	structs   map[string]*ast.StructType
	consts    map[string]string // string constants
	funcs     []*ast.FuncDecl
	registers []string // the names passed to backend.Register
}

func parseGoDir(dir string) (*goPkg, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	p := &goPkg{structs: map[string]*ast.StructType{}, consts: map[string]string{}}
	var calls []*ast.CallExpr
	fset := token.NewFileSet()
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				p.funcs = append(p.funcs, n)
			case *ast.TypeSpec:
				if st, ok := n.Type.(*ast.StructType); ok {
					p.structs[n.Name.Name] = st
				}
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if i < len(n.Values) {
						if lit, ok := n.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							p.consts[name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			case *ast.CallExpr:
				if exprString(n.Fun) == "backend.Register" && len(n.Args) > 0 {
					calls = append(calls, n)
				}
			}
			return true
		})
	}
	for _, c := range calls {
		name := ""
		switch a := c.Args[0].(type) {
		case *ast.BasicLit:
			name, _ = strconv.Unquote(a.Value)
		case *ast.Ident:
			name = p.consts[a.Name]
		}
		if name == "" {
			return nil, fmt.Errorf("%s: backend.Register(%s): cannot tell the name", dir, exprString(c.Args[0]))
		}
		if !slices.Contains(p.registers, name) {
			p.registers = append(p.registers, name)
		}
	}
	return p, nil
}

// unmarshalledKeys returns the JSON keys of the variables fn passes to json.Unmarshal with a
// first argument that from accepts: variables declared in fn with a struct type, literal or
// named in pkg.
func unmarshalledKeys(fn *ast.FuncDecl, pkg *goPkg, from func(ast.Expr) bool) []string {
	// The struct type of each variable fn declares: var v T, v := T{...}.
	types := map[string]ast.Expr{}
	ast.Inspect(fn, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			for _, name := range n.Names {
				if n.Type != nil {
					types[name.Name] = n.Type
				}
			}
		case *ast.AssignStmt:
			for i, l := range n.Lhs {
				id, ok := l.(*ast.Ident)
				if !ok || i >= len(n.Rhs) {
					continue
				}
				if lit, ok := n.Rhs[i].(*ast.CompositeLit); ok && lit.Type != nil {
					types[id.Name] = lit.Type
				}
			}
		}
		return true
	})
	var keys []string
	ast.Inspect(fn, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || exprString(call.Fun) != "json.Unmarshal" || len(call.Args) != 2 || !from(call.Args[0]) {
			return true
		}
		u, ok := call.Args[1].(*ast.UnaryExpr)
		if !ok || u.Op != token.AND {
			return true
		}
		id, ok := u.X.(*ast.Ident)
		if !ok {
			return true
		}
		switch t := types[id.Name].(type) {
		case *ast.StructType:
			keys = jsonKeys(t, keys)
		case *ast.Ident:
			if st := pkg.structs[t.Name]; st != nil {
				keys = jsonKeys(st, keys)
			}
		}
		return true
	})
	return keys
}

// jsonKeys appends the keys encoding/json decodes into the exported fields of st, lower-cased
// (encoding/json matches them case-insensitively).
func jsonKeys(st *ast.StructType, keys []string) []string {
	for _, f := range st.Fields.List {
		tag := ""
		if f.Tag != nil {
			s, _ := strconv.Unquote(f.Tag.Value)
			tag, _, _ = strings.Cut(reflect.StructTag(s).Get("json"), ",")
		}
		for _, n := range f.Names {
			switch {
			case !n.IsExported() || tag == "-":
			case tag != "":
				keys = append(keys, strings.ToLower(tag))
			default:
				keys = append(keys, strings.ToLower(n.Name))
			}
		}
	}
	return keys
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	}
	return ""
}

// TestFlannelReadsWeftLease: flanneld, with its own lease type (tools/flannel/leasecompat,
// run in the flannel module this tree pins), reads the lease value weftd writes in etcd mode,
// its node identity included, and writes back flannel's value without it: a node migrated
// back to flanneld keeps its lease.
func TestFlannelReadsWeftLease(t *testing.T) {
	modDir := filepath.Join("..", "tools", "flannel")
	if _, err := flannelModule(modDir); err != nil {
		t.Skipf("no flannel module to read the lease with: %v", err)
	}
	attrs := LeaseAttrs{PublicIP: netip.MustParseAddr("192.168.64.3"), PublicIPv6: netip.MustParseAddr("fd00::3"), BackendType: "vxlan",
		BackendData: json.RawMessage(`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}`), BackendV6Data: json.RawMessage(`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:45"}`)}
	flannel, err := attrs.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	attrs.NodeID = "00112233445566778899aabbccddeeff"
	weft, err := attrs.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(weft), attrs.NodeID) {
		t.Fatalf("weft's lease value %s lacks the node identity", weft)
	}
	cmd := exec.Command("go", "test", "-count=1", "-v", "-run", "TestFlanneldReadsWeftLease", "./leasecompat/")
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "WEFT_LEASE_VALUE="+string(weft), "WEFT_LEASE_FLANNEL="+string(flannel))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestFlanneldReadsWeftLease") {
		t.Errorf("flanneld's reading of %s: %v\n%s", weft, err, out)
	}
}
