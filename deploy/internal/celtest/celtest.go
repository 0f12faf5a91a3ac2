// Package celtest compiles and runs admission policies' CEL for the
// deploy module's offline policy tests: the part of the API server's
// admission CEL environment the policies use, with every variable a
// dynamic value. The API server's own compile, with typed objects, is
// the cluster tier's.
package celtest

import (
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
)

// Env returns an environment with the strings extension (lowerAscii),
// optional types when optional is set, and vars as dynamic variables.
func Env(t *testing.T, optional bool, vars ...string) *cel.Env {
	t.Helper()
	opts := []cel.EnvOption{ext.Strings(ext.StringsVersion(2))}
	if optional {
		opts = append(opts, cel.OptionalTypes())
	}
	for _, v := range vars {
		opts = append(opts, cel.Variable(v, cel.DynType))
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// Eval compiles expr and runs it on vars; a compile or evaluation error
// fails the test (the API server would refuse the request: failurePolicy
// Fail).
func Eval(t *testing.T, env *cel.Env, expr string, vars map[string]any) any {
	t.Helper()
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		t.Fatalf("compile %q: %v", expr, iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := prg.Eval(vars)
	if err != nil {
		t.Fatalf("eval %q: %v", expr, err)
	}
	return out.Value()
}
