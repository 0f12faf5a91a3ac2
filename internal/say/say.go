// Package say prints what the operator commands report to people: a
// failed write to a command's output or error stream is not something the
// command can report anywhere, so these writes drop the error.
package say

import (
	"fmt"
	"io"
)

// Printf writes format with args to w.
func Printf(w io.Writer, format string, args ...any) { _, _ = fmt.Fprintf(w, format, args...) }

// Println writes args to w as fmt.Fprintln does.
func Println(w io.Writer, args ...any) { _, _ = fmt.Fprintln(w, args...) }
