package allreduce

// AutoRan is the group's record of the AllReduce algorithm Auto ran for
// the size class of a call of the given bytes (None: no such call yet).
func AutoRan(g *Group, bytes int) Algorithm {
	return Algorithm(g.picked(KindAllReduce, sizeClass(bytes)))
}
