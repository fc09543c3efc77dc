# Sourced by scripts/run.sh and bench/ws_recall.sh: the VM flags SoulMem's server runs with
# when started through mix (a release sets the same ones in rel/vm.args.eex).
#
# No busy waiting (+sbwt/+sbwtdcpu/+sbwtdio none): the native core runs its own threads on the
# same cores as the BEAM's schedulers (the query embedding's and the scans' pool, the word
# index synced beside the vectors). A scheduler that spins for work after a burst takes a core
# from them in the middle of a recall; on 2 cores that cost a stored 100k-note character's
# WebSocket recall ~5 ms at p95 (bench/README.md, fifteenth round).
export ERL_FLAGS="${ERL_FLAGS:+$ERL_FLAGS }+sbwt none +sbwtdcpu none +sbwtdio none"
