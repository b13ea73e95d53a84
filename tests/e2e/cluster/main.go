// Command e2e-cluster is one binary for the control plane the end-to-end tests start:
// etcd, kube-apiserver, kube-controller-manager and kubectl, all from the releases pinned in
// go.mod. One link instead of four saves most of the build (docs/e2e.md).
//
// The program is chosen by the name it is run as (a symlink named kube-apiserver, ...) or,
// when run as e2e-cluster, by its first argument:
//
//	e2e-cluster kube-apiserver --etcd-servers=... (same flags as the real kube-apiserver)
//	ln -s e2e-cluster kubectl && ./kubectl get pods
package main

import (
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // CronJob time zones, as the real kube-apiserver and controller manager

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

const usage = `usage: e2e-cluster PROGRAM [ARGS...]   (or run through a symlink named PROGRAM)
PROGRAM is one of: etcd, kube-apiserver, kube-controller-manager, kubectl
`

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args
	if name == "e2e-cluster" {
		if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" {
			fmt.Fprint(os.Stderr, usage)
			os.Exit(2)
		}
		name = os.Args[1]
		args = append([]string{name}, os.Args[2:]...)
	}
	// Each program parses os.Args itself (cobra, etcd's flag set): present it as its own argv.
	os.Args = args
	switch name {
	case "etcd":
		etcdmain.Main(args)
	case "kube-apiserver":
		os.Exit(cli.Run(apiserver.NewAPIServerCommand()))
	case "kube-controller-manager":
		os.Exit(cli.Run(controllermanager.NewControllerManagerCommand()))
	case "kubectl":
		logs.GlogSetter(kubectlcmd.GetLogVerbosity(args)) //nolint:errcheck
		if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
	default:
		fmt.Fprintf(os.Stderr, "e2e-cluster: unknown program %q\n%s", name, usage)
		os.Exit(2)
	}
}
