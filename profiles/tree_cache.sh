# Sourced by ab_trees.sh, wip_trees.sh and wip_session.sh: the compile cache of a source tree on
# the GPU machine, named after the tree's directory, so every script finds the cache another
# filled (a tree "." is named by its real directory).
cache_of() { echo "/root/cache_$(basename "$(cd "$1" && pwd)")"; }
