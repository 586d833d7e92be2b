package zero

import (
	"github.com/ringddp/ringddp/ddp"
	"github.com/ringddp/ringddp/optim"
)

// BuddyShadow is z's copy of its left rank's shard (tests: damage it).
func BuddyShadow[T ddp.Float](z *ZeRO1[T]) optim.Optimizer[T] { return z.buddy.shadow }
