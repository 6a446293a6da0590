// Command compose-loader loads a docker compose file with compose-go, the loader docker compose
// itself uses (schema validation, .env interpolation, YAML merge keys, normalization), and prints
// the resolved project as JSON. The packaging tests run it because no Docker engine is here.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: compose-loader COMPOSE_FILE")
		os.Exit(2)
	}
	file, err := filepath.Abs(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "compose-loader:", err)
		os.Exit(2)
	}
	options, err := cli.NewProjectOptions(
		[]string{file},
		cli.WithWorkingDirectory(filepath.Dir(file)),
		// Only the folder's .env: the result must not depend on who runs it.
		cli.WithDotEnv,
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compose-loader:", err)
		os.Exit(1)
	}
	project, err := options.LoadProject(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "compose-loader:", err)
		os.Exit(1)
	}
	out, err := json.MarshalIndent(project, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, "compose-loader:", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
