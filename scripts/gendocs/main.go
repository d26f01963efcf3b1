// Command gendocs regenerates man/ and completions/ from the command tree:
// go run ./scripts/gendocs [DIR]
package main

import (
	"fmt"
	"os"

	"github.com/continuum-router/continuum/internal/cli"
)

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	if err := cli.GenerateDocs(dir); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}
