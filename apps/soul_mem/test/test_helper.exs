Code.require_file("support/test_support.ex", __DIR__)
Code.require_file("support/cluster_support.ex", __DIR__)

ExUnit.start()

# The cluster tests (tag :cluster) start OTP :peer nodes, which needs this VM
# to be distributed; where it cannot be (no epmd, no loopback), they are
# excluded with a message instead of failing.
case SoulMem.ClusterSupport.distribution() do
  :ok ->
    :ok

  {:error, reason} ->
    IO.puts("cluster tests skipped: distribution cannot start here (#{inspect(reason)})")
    ExUnit.configure(exclude: [:cluster])
end
