package rendezvous

import (
	"strings"
	"testing"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		want Env
	}{
		{"nothing", nil, Env{Rank: 0, WorldSize: 1, LocalRank: 0, LocalWorldSize: 1, MasterPort: DefaultMasterPort}},
		{"torchrun", map[string]string{"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
			"MASTER_ADDR": "node0", "MASTER_PORT": "1234", "RINGDDP_SECRET": "s"},
			Env{Rank: 3, WorldSize: 8, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "node0", MasterPort: 1234, Secret: []byte("s"), Found: true, Launcher: "torchrun"}},
		{"torchrun wins over slurm", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "4", "MASTER_ADDR": "10.0.0.1"},
			Env{Rank: 1, WorldSize: 2, MasterAddr: "10.0.0.1", MasterPort: DefaultMasterPort, Found: true, Launcher: "torchrun"}},
		{"openmpi", map[string]string{"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
			"OMPI_COMM_WORLD_LOCAL_SIZE": "3", "MASTER_ADDR": "::1", "SLURM_PROCID": "9"},
			Env{Rank: 5, WorldSize: 6, LocalRank: 1, LocalWorldSize: 3, MasterAddr: "::1", MasterPort: DefaultMasterPort, Found: true, Launcher: "openmpi"}},
		{"slurm", map[string]string{"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "2", "MASTER_ADDR": "[fe80::1]"},
			Env{Rank: 2, WorldSize: 4, LocalRank: 0, LocalWorldSize: 2, MasterAddr: "fe80::1", MasterPort: DefaultMasterPort, Found: true, Launcher: "slurm"}},
		{"slurm tasks per node", map[string]string{"SLURM_PROCID": "6", "SLURM_NTASKS": "7", "SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "2(x3),1",
			"SLURM_NODEID": "3", "MASTER_ADDR": "n0"},
			Env{Rank: 6, WorldSize: 7, LocalRank: 0, LocalWorldSize: 1, MasterAddr: "n0", MasterPort: DefaultMasterPort, Found: true, Launcher: "slurm"}},
		{"slurm tasks per node, repeated", map[string]string{"SLURM_PROCID": "3", "SLURM_NTASKS": "7", "SLURM_LOCALID": "1", "SLURM_TASKS_PER_NODE": "2(x3),1",
			"SLURM_NODEID": "1", "MASTER_ADDR": "n0"},
			Env{Rank: 3, WorldSize: 7, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "n0", MasterPort: DefaultMasterPort, Found: true, Launcher: "slurm"}},
		{"no local info", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h"},
			Env{Rank: 1, WorldSize: 2, LocalWorldSize: 0, MasterAddr: "h", MasterPort: DefaultMasterPort, Found: true, Launcher: "torchrun"}},
		{"single rank, no master", map[string]string{"RANK": "0", "WORLD_SIZE": "1"},
			Env{Rank: 0, WorldSize: 1, LocalWorldSize: 1, MasterPort: DefaultMasterPort, Found: true, Launcher: "torchrun"}},
		{"spaces trimmed", map[string]string{"RANK": " 1 ", "WORLD_SIZE": "2\n", "MASTER_ADDR": " h ", "MASTER_PORT": " 80 "},
			Env{Rank: 1, WorldSize: 2, MasterAddr: "h", MasterPort: 80, Found: true, Launcher: "torchrun"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromEnv(envOf(tc.vars))
			if err != nil {
				t.Fatal(err)
			}
			if string(got.Secret) != string(tc.want.Secret) {
				t.Errorf("secret %q, want %q", got.Secret, tc.want.Secret)
			}
			got.Secret, tc.want.Secret = nil, nil
			if got.Rank != tc.want.Rank || got.WorldSize != tc.want.WorldSize || got.LocalRank != tc.want.LocalRank ||
				got.LocalWorldSize != tc.want.LocalWorldSize || got.MasterAddr != tc.want.MasterAddr ||
				got.MasterPort != tc.want.MasterPort || got.Found != tc.want.Found || got.Launcher != tc.want.Launcher {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		text string // the error must contain this
	}{
		{"rank without size", map[string]string{"RANK": "0"}, "WORLD_SIZE is not"},
		{"size without rank", map[string]string{"WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "RANK is not"},
		{"non-numeric rank", map[string]string{"RANK": "one", "WORLD_SIZE": "2"}, `RANK="one"`},
		{"non-numeric size", map[string]string{"RANK": "0", "WORLD_SIZE": "2x"}, `WORLD_SIZE="2x"`},
		{"rank = size", map[string]string{"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "out of range"},
		{"negative rank", map[string]string{"RANK": "-1", "WORLD_SIZE": "2"}, "RANK=-1"},
		{"zero size", map[string]string{"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE=0"},
		{"no master addr", map[string]string{"RANK": "0", "WORLD_SIZE": "2"}, "MASTER_ADDR is not set"},
		{"master addr with port", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h:29500"}, "MASTER_ADDR"},
		{"bad port", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "http"}, "MASTER_PORT"},
		{"port out of range", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "70000"}, "MASTER_PORT"},
		{"local rank >= local size", map[string]string{"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "local rank 2"},
		{"local size > size", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "h"}, "4 ranks on this host"},
		{"ompi malformed", map[string]string{"OMPI_COMM_WORLD_RANK": "x", "OMPI_COMM_WORLD_SIZE": "2"}, "OMPI_COMM_WORLD_RANK"},
		{"slurm rank >= size", map[string]string{"SLURM_PROCID": "4", "SLURM_NTASKS": "4", "MASTER_ADDR": "h"}, "SLURM_PROCID=4"},
		{"slurm malformed tasks per node", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_TASKS_PER_NODE": "2(x", "SLURM_NODEID": "0", "MASTER_ADDR": "h"}, "SLURM_TASKS_PER_NODE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromEnv(envOf(tc.vars))
			if err == nil || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("got %v, want an error mentioning %q", err, tc.text)
			}
		})
	}
}
