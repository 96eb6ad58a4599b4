// composecheck loads a Compose file with compose-go, the loader `docker compose config` is built on,
// and prints the normalized project as JSON. An invalid file exits non-zero with the loader's message.
//
//	composecheck -f docker-compose.yml -env-file docker/.env.example [-project-name NAME]
//
// Only the given env files are read (never the process environment), so the output depends on the
// files alone.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/compose-spec/compose-go/v2/cli"
)

type fileList []string

func (f *fileList) String() string     { return fmt.Sprint(*f) }
func (f *fileList) Set(v string) error { *f = append(*f, v); return nil }

func main() {
	var files, envFiles fileList
	flag.Var(&files, "f", "Compose file (repeatable)")
	flag.Var(&envFiles, "env-file", "env file for interpolation (repeatable)")
	name := flag.String("project-name", "airflow-logstore", "project name")
	flag.Parse()
	if len(files) == 0 {
		fmt.Fprintln(os.Stderr, "composecheck: -f is required")
		os.Exit(2)
	}
	workdir, err := filepath.Abs(filepath.Dir(files[0]))
	if err != nil {
		fail(err)
	}
	options, err := cli.NewProjectOptions(files,
		cli.WithName(*name),
		cli.WithWorkingDirectory(workdir),
		cli.WithEnvFiles(envFiles...),
		cli.WithDotEnv,
		cli.WithResolvedPaths(false),
	)
	if err != nil {
		fail(err)
	}
	project, err := options.LoadProject(context.Background())
	if err != nil {
		fail(err)
	}
	out, err := project.MarshalJSON()
	if err != nil {
		fail(err)
	}
	os.Stdout.Write(out)
	os.Stdout.WriteString("\n")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "composecheck:", err)
	os.Exit(1)
}
