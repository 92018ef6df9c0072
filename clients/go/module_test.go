package sqlq_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestClientModuleBuildsFromAnotherModuleOffline does what the README
// says a user does: a module of its own in a clean directory, pointed at
// this directory with go mod edit, builds a program that uses the client,
// with nothing to fetch (GOPROXY=off).
func TestClientModuleBuildsFromAnotherModuleOffline(t *testing.T) {
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	app := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = app
		cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=", "GOTOOLCHAIN=local", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("mod", "init", "example.com/app")
	run("mod", "edit", "-require=sqlq.dev/go/sqlq@v0.0.0", "-replace=sqlq.dev/go/sqlq="+here)
	main := `package main

import (
	"context"
	"fmt"
	"os"

	"sqlq.dev/go/sqlq"
)

func main() {
	c, err := sqlq.New("http://127.0.0.1:1")
	if err != nil {
		panic(err)
	}
	w := sqlq.NewWorker(c, "emails", func(ctx context.Context, m *sqlq.Message) error { return nil },
		sqlq.WorkerOptions{Concurrency: 2})
	fmt.Println(w != nil, os.Args[0] != "")
}
`
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	run("build", "-o", filepath.Join(app, "app"), ".")
	out, err := exec.Command(filepath.Join(app, "app")).Output()
	if err != nil || string(out) != "true true\n" {
		t.Fatalf("the program: %q %v", out, err)
	}
}
