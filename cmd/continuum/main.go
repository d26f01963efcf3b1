// Command continuum is the Continuum router and toolkit for NVIDIA Dynamo.
package main

import (
	"os"

	"github.com/continuum-router/continuum/internal/cli"
)

func main() { os.Exit(cli.Main()) }
