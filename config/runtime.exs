# Runtime configuration, evaluated at boot (by `mix` and by releases).
#
# Every setting comes from an environment variable with a default suitable
# for local development. Malformed values stop the boot with a message that
# names the variable, what it expects and what it got.
import Config

env_string = fn name, default ->
  case System.get_env(name) do
    nil -> default
    "" -> default
    value -> value
  end
end

# A number from the environment within [min, max]; `parse` is Integer.parse/1
# or Float.parse/1 and `what` names the kind in the error.
env_number = fn name, default, min, max, parse, what ->
  case System.get_env(name) do
    nil ->
      default

    "" ->
      default

    raw ->
      case parse.(String.trim(raw)) do
        {value, ""} when value >= min and value <= max ->
          value

        _ ->
          raise ArgumentError,
                "environment variable #{name} must be #{what} between " <>
                  "#{min} and #{max}, got: #{inspect(raw)}"
      end
  end
end

env_integer = fn name, default, min, max ->
  env_number.(name, default, min, max, &Integer.parse/1, "an integer")
end

env_float = fn name, default, min, max ->
  env_number.(name, default, min, max, &Float.parse/1, "a number")
end

# Releases keep characters under the user's data home (XDG); development and
# tests under ./data/<env> in the checkout.
default_data_dir =
  if config_env() == :prod,
    do: Path.join(env_string.("XDG_DATA_HOME", Path.expand("~/.local/share")), "soulmem"),
    else: Path.expand("../data/#{config_env()}", __DIR__)

# SOUL_MEM_DEMO_GRAPH: the graph a new demo character is seeded from instead of
# the shipped one (e.g. a larger character for bench/cost_growth.sh).
if demo_graph = env_string.("SOUL_MEM_DEMO_GRAPH", nil) do
  demo_graph = Path.expand(demo_graph)

  unless File.regular?(demo_graph),
    do: raise(ArgumentError, "SOUL_MEM_DEMO_GRAPH must name a graph file, got: #{demo_graph}")

  config :soul_mem, seeds: %{"demo" => demo_graph}
end

config :soul_mem,
  # Size limit of a graph file a character is started or seeded from (an operator's file);
  # unset: SoulMem.Memory's import default (50 MB), which the loader then applies.
  graph_max_bytes: env_integer.("SOUL_MEM_GRAPH_MAX_BYTES", nil, 1, 1_000_000_000_000),
  # Stored graphs above this many notes run in working memory (from the start after the
  # one that imported them) instead of being loaded whole.
  working_memory_threshold:
    env_integer.("SOUL_MEM_WORKING_MEMORY_THRESHOLD", 50_000, 0, 1_000_000_000_000),
  data_dir: Path.expand(env_string.("SOUL_MEM_DATA_DIR", default_data_dir)),
  port: env_integer.("PORT", 4000, 0, 65_535),
  llm_base_url: env_string.("SOUL_MEM_LLM_BASE_URL", nil),
  llm_api_key: env_string.("SOUL_MEM_LLM_API_KEY", nil),
  llm_model: env_string.("SOUL_MEM_LLM_MODEL", nil),
  window: env_integer.("SOUL_MEM_WINDOW", 12, 1, 10_000),
  idle_after_ms: env_integer.("SOUL_MEM_IDLE_AFTER_MS", 300_000, 0, 86_400_000),
  # Only dev and test have a well-known demo token; a release without one makes
  # a random token at first start (SoulMemWeb.Application) and prints it once.
  demo_token:
    env_string.("SOUL_MEM_DEMO_TOKEN", if(config_env() in [:dev, :test], do: "dev-token")),
  similarity_floor: env_float.("SOUL_MEM_SIMILARITY_FLOOR", nil, 0.0, 1.0),
  # Where /v1/chat/completions puts the memory: before, after (the frontend's
  # leading system messages) or depth:N (before the N-th message from the end).
  completion_context_position:
    (case env_string.("SOUL_MEM_CONTEXT_POSITION", "after") do
       "before" ->
         :before

       "after" ->
         :after

       "depth:" <> n ->
         case Integer.parse(n) do
           {d, ""} when d >= 0 ->
             {:depth, d}

           _ ->
             raise "SOUL_MEM_CONTEXT_POSITION: expected before, after or depth:N, got depth:#{n}"
         end

       other ->
         raise "SOUL_MEM_CONTEXT_POSITION: expected before, after or depth:N, got #{other}"
     end)

# A cluster (SoulMem.Cluster): SOUL_MEM_CLUSTER_NODES (comma-separated node
# names) and/or SOUL_MEM_CLUSTER_GOSSIP=true (UDP multicast, needs
# SOUL_MEM_CLUSTER_SECRET of at least 16 bytes) turn it on;
# SOUL_MEM_CLUSTER=hosts uses .hosts.erlang instead of a list.
# SOUL_MEM_CLUSTER_REPLICAS=1 keeps a second copy of every character on the
# next node (SoulMem.Cluster.Replication), which takes over when its home has
# been down SOUL_MEM_CLUSTER_FAILOVER_MS (5000).
cluster_nodes = "SOUL_MEM_CLUSTER_NODES" |> env_string.("") |> String.split(",", trim: true)

cluster_gossip = env_string.("SOUL_MEM_CLUSTER_GOSSIP", "false") in ["true", "1", "yes"]
cluster_hosts = env_string.("SOUL_MEM_CLUSTER", "") == "hosts"

parse_ip = fn name, raw ->
  case :inet.parse_address(String.to_charlist(raw)) do
    {:ok, ip} -> ip
    _ -> raise ArgumentError, "environment variable #{name} must be an IP address, got: #{raw}"
  end
end

if cluster_nodes != [] or cluster_gossip or cluster_hosts do
  secret = env_string.("SOUL_MEM_CLUSTER_SECRET", nil)

  if cluster_gossip and (secret == nil or byte_size(secret) < 16),
    do: raise(ArgumentError, "SOUL_MEM_CLUSTER_GOSSIP needs SOUL_MEM_CLUSTER_SECRET (16+ bytes)")

  static =
    if cluster_nodes != [] or cluster_hosts,
      do: [{SoulMem.Cluster.Discovery.Static, nodes: cluster_nodes}],
      else: []

  gossip =
    if cluster_gossip,
      do: [
        {SoulMem.Cluster.Discovery.Gossip,
         secret: secret,
         group:
           parse_ip.(
             "SOUL_MEM_CLUSTER_GOSSIP_GROUP",
             env_string.("SOUL_MEM_CLUSTER_GOSSIP_GROUP", "233.252.1.32")
           ),
         port: env_integer.("SOUL_MEM_CLUSTER_GOSSIP_PORT", 45_892, 1, 65_535),
         ttl: env_integer.("SOUL_MEM_CLUSTER_GOSSIP_TTL", 1, 1, 255),
         interface:
           parse_ip.(
             "SOUL_MEM_CLUSTER_GOSSIP_IF",
             env_string.("SOUL_MEM_CLUSTER_GOSSIP_IF", "0.0.0.0")
           )}
      ],
      else: []

  config :soul_mem,
    cluster: [
      enabled: true,
      weight: env_integer.("SOUL_MEM_CLUSTER_WEIGHT", nil, 1, 1_000_000),
      replicas: env_integer.("SOUL_MEM_CLUSTER_REPLICAS", 0, 0, 1),
      failover_after_ms: env_integer.("SOUL_MEM_CLUSTER_FAILOVER_MS", 5_000, 0, 3_600_000),
      discovery: static ++ gossip
    ]
end

# Browser pages that may open the socket besides the endpoint's own loopback
# origin (SoulMemWeb.Router.origin_allowed?/2), e.g. "http://192.168.1.5:4000".
config :soul_mem_web,
  allowed_origins:
    "SOUL_MEM_ALLOWED_ORIGINS"
    |> env_string.("")
    |> String.split(",", trim: true)
    |> Enum.map(&(&1 |> String.trim() |> String.trim_trailing("/")))
    |> Enum.reject(&(&1 == "")),
  generate_demo_token: config_env() not in [:dev, :test],
  # The operator token of the page's operator view and /api/operator (list
  # characters, create and revoke their tokens). Only dev and test have a
  # well-known one; a release makes a random one at first start, printed once.
  operator_token:
    env_string.(
      "SOUL_MEM_OPERATOR_TOKEN",
      if(config_env() in [:dev, :test], do: "dev-operator")
    )

# The MessagePack data plane (SoulMemWeb.DataPlane) for services off the BEAM:
# off unless SOUL_MEM_DATA_PORT gives it a port; loopback only unless
# `config :soul_mem_web, data_plane: [host: "0.0.0.0"]`.
if data_port = env_integer.("SOUL_MEM_DATA_PORT", nil, 0, 65_535) do
  config :soul_mem_web,
    data_plane: Keyword.put(Application.get_env(:soul_mem_web, :data_plane, []), :port, data_port)
end

# A release serves the chat endpoint on boot (SOUL_MEM_SERVER=false turns it
# off); `mix` runs serve it only through `mix soul.server` / scripts/run.sh.
if config_env() == :prod do
  config :soul_mem_web,
    server: env_string.("SOUL_MEM_SERVER", "true") not in ["false", "0", "no"]
end
