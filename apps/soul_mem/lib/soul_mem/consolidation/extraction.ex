defmodule SoulMem.Consolidation.Extraction do
  @moduledoc """
  The LLM side of consolidation: the JSON Schema the extraction answer must
  match, and a strict validator that turns an answer into a change set for
  `SoulMem.Native.engine_consolidate/3` — or lists everything wrong with it.

  The answer is deliberately flat (small local models follow flat schemas
  far better than the Graph JSON shapes):

      {"notes": [
         {"key": "xiaohei", "kind": "semantic", "content": "小黑", "aliases": ["黑黑"],
          "concept_type": "entity", "description": "小白养的猫"},
         {"key": "s1", "kind": "specific_situation", "narrative": "我和小白去猫咖……",
          "time": "", "location": "猫咖", "participants": [{"name": "小白", "role": "朋友"}],
          "emotions": [{"name": "开心", "intensity": 0.8}],
          "events": [{"initiator": "我", "action": "摸猫", "target": "小黑"}],
          "atmosphere": "", "tone": ""},
         {"key": "a1", "kind": "abstract_situation", "facet": "participant",
          "name": "小白", "detail": "朋友"},
         {"key": "p1", "kind": "procedure", "content": "紧张时摸辫子", "action_type": "skill"}],
       "links": [{"from": "s1", "to": "xiaohei", "type": "relation", "relation": "见到",
                  "strength": 0.9}]}

  Link types: `relation` (semantic link: `relation` is the verb, `strength`
  the confidence), `trigger` (situation → procedure, `strength` is the
  probability), `instance_of` (specific → abstract situation; the reverse
  edge is added too). Endpoints are note keys or ids of existing notes the
  prompt offered. Optional fields (aliases, description, context fields,
  detail, relation, strength) may be left out; unknown fields, wrong types,
  unknown kinds, out-of-range numbers, dangling endpoints and oversized
  answers are errors.
  """

  @kinds ~w(semantic specific_situation abstract_situation procedure)
  @link_types ~w(relation trigger instance_of)
  @facets %{
    "participant" => "Participant",
    "location" => "Location",
    "event" => "Event",
    "environment" => "Environment"
  }
  @action_types %{"speak" => "Speak", "think" => "Think", "skill" => %{"Skill" => %{}}}
  @key_re ~r/^[\p{L}\p{N}_\-]{1,40}$/u
  @max_errors 20

  @typedoc "Limits: `:max_notes`, `:max_links`, `:max_text` (characters), `:max_list`."
  @type limits :: [
          max_notes: pos_integer(),
          max_links: pos_integer(),
          max_text: pos_integer(),
          max_list: pos_integer()
        ]

  @default_limits [max_notes: 200, max_links: 1000, max_text: 2000, max_list: 64]

  @doc "The default limits (the same as the Rust side's defaults)."
  @spec default_limits() :: limits()
  def default_limits, do: @default_limits

  @doc """
  The JSON Schema of an answer (strict-mode compatible: every property
  required, no additional properties; optional values are empty strings or
  lists).
  """
  @spec schema() :: map()
  def schema do
    str = %{"type" => "string"}
    strs = %{"type" => "array", "items" => str}
    unit = %{"type" => "number", "minimum" => 0, "maximum" => 1}

    named = fn props ->
      %{
        "type" => "object",
        "properties" => props,
        "required" => Map.keys(props),
        "additionalProperties" => false
      }
    end

    note = fn kind, props ->
      named.(Map.merge(%{"key" => str, "kind" => %{"type" => "string", "enum" => [kind]}}, props))
    end

    %{
      "type" => "object",
      "additionalProperties" => false,
      "required" => ["notes", "links"],
      "properties" => %{
        "notes" => %{
          "type" => "array",
          "items" => %{
            "anyOf" => [
              note.("semantic", %{
                "content" => str,
                "aliases" => strs,
                "concept_type" => %{"type" => "string", "enum" => ["entity", "abstract"]},
                "description" => str
              }),
              note.("specific_situation", %{
                "narrative" => str,
                "time" => str,
                "location" => str,
                "participants" => %{
                  "type" => "array",
                  "items" => named.(%{"name" => str, "role" => str})
                },
                "emotions" => %{
                  "type" => "array",
                  "items" => named.(%{"name" => str, "intensity" => unit})
                },
                "events" => %{
                  "type" => "array",
                  "items" => named.(%{"initiator" => str, "action" => str, "target" => str})
                },
                "atmosphere" => str,
                "tone" => str
              }),
              note.("abstract_situation", %{
                "facet" => %{"type" => "string", "enum" => Map.keys(@facets)},
                "name" => str,
                "detail" => str
              }),
              note.("procedure", %{
                "content" => str,
                "action_type" => %{"type" => "string", "enum" => Map.keys(@action_types)}
              })
            ]
          }
        },
        "links" => %{
          "type" => "array",
          "items" =>
            named.(%{
              "from" => str,
              "to" => str,
              "type" => %{"type" => "string", "enum" => @link_types},
              "relation" => str,
              "strength" => unit
            })
        }
      }
    }
  end

  @doc """
  Validates `answer` (the decoded JSON of the LLM's reply) and converts it.

  `existing` maps ids of existing notes the answer may link to onto their
  kind (`"semantic"`, `"specific_situation"`, …). `now` bounds situation
  times. Returns `{:ok, %{"notes" => [...], "links" => [...]}}` in the
  change-set shape (keys prefixed `new:`), or `{:error, messages}` with at
  most 20 human-readable problems (fed back to the LLM on retry).
  """
  @spec validate(term(), %{String.t() => String.t()}, DateTime.t(), limits()) ::
          {:ok, %{String.t() => list()}} | {:error, [String.t()]}
  def validate(answer, existing, %DateTime{} = now, limits \\ []) do
    limits = Keyword.validate!(limits, @default_limits)

    with :ok <- top_level(answer),
         :ok <- count("notes", answer["notes"], limits[:max_notes]),
         :ok <- count("links", answer["links"], limits[:max_links]) do
      {notes, errors} =
        answer["notes"]
        |> Enum.with_index()
        |> Enum.map_reduce([], fn {note, i}, errs ->
          case note(note, now, limits) do
            {:ok, converted} -> {converted, errs}
            {:error, e} -> {nil, errs ++ Enum.map(e, &"notes[#{i}]: #{&1}")}
          end
        end)

      notes = Enum.reject(notes, &is_nil/1)
      {notes, errors} = unique_keys(notes, errors)
      kinds = Map.merge(existing, Map.new(notes, &{&1.key, &1.kind}))
      keys = MapSet.new(notes, & &1.key)

      {links, errors} =
        answer["links"]
        |> Enum.with_index()
        |> Enum.flat_map_reduce(errors, fn {link, i}, errs ->
          case link(link, kinds, keys, limits) do
            {:ok, converted} -> {converted, errs}
            {:error, e} -> {[], errs ++ Enum.map(e, &"links[#{i}]: #{&1}")}
          end
        end)

      if errors == [] do
        {:ok, %{"notes" => Enum.map(notes, & &1.change), "links" => links}}
      else
        {:error, Enum.take(errors, @max_errors)}
      end
    end
  end

  defp top_level(%{"notes" => notes, "links" => links} = answer)
       when is_list(notes) and is_list(links) do
    case Map.keys(answer) -- ["notes", "links"] do
      [] -> :ok
      extra -> {:error, ["unknown top-level fields: #{Enum.join(extra, ", ")}"]}
    end
  end

  defp top_level(_),
    do: {:error, ["the answer must be an object with the lists \"notes\" and \"links\""]}

  defp count(what, list, max) do
    if length(list) > max,
      do: {:error, ["#{length(list)} #{what}, at most #{max} allowed"]},
      else: :ok
  end

  defp unique_keys(notes, errors) do
    {kept, _seen, errors} =
      Enum.reduce(notes, {[], MapSet.new(), errors}, fn n, {acc, seen, errs} ->
        if MapSet.member?(seen, n.key),
          do: {acc, seen, errs ++ ["duplicate key #{inspect(n.key)}"]},
          else: {[n | acc], MapSet.put(seen, n.key), errs}
      end)

    {Enum.reverse(kept), errors}
  end

  ## Notes

  @fields %{
    "semantic" => {~w(key kind content), ~w(aliases concept_type description)},
    "specific_situation" =>
      {~w(key kind narrative), ~w(time location participants emotions events atmosphere tone)},
    "abstract_situation" => {~w(key kind facet name), ~w(detail)},
    "procedure" => {~w(key kind content), ~w(action_type)}
  }

  defp note(%{"kind" => kind} = n, now, limits) when kind in @kinds do
    {required, optional} = Map.fetch!(@fields, kind)

    errors =
      Enum.map(required -- Map.keys(n), &"missing field #{inspect(&1)}") ++
        Enum.map(Map.keys(n) -- (required ++ optional), &"unknown field #{inspect(&1)}")

    with [] <- errors,
         {:ok, key} <- key(n["key"]),
         {:ok, mem_type} <- payload(kind, n, now, limits) do
      {:ok, %{key: key, kind: kind, change: %{"key" => "new:" <> key, "mem_type" => mem_type}}}
    else
      {:error, e} -> {:error, List.wrap(e)}
      errors when is_list(errors) -> {:error, errors}
    end
  end

  defp note(%{"kind" => kind}, _now, _limits),
    do: {:error, ["unknown kind #{inspect(kind)}, expected one of #{Enum.join(@kinds, ", ")}"]}

  defp note(_other, _now, _limits), do: {:error, ["must be an object with a \"kind\""]}

  defp key(k) when is_binary(k) do
    if Regex.match?(@key_re, k),
      do: {:ok, k},
      else: {:error, "key #{inspect(k)} must be 1 to 40 letters, digits, _ or -"}
  end

  defp key(k), do: {:error, "key must be a string, got #{inspect(k)}"}

  defp payload("semantic", n, _now, l) do
    with {:ok, content} <- text(n, "content", l, required: true),
         {:ok, aliases} <- texts(n, "aliases", l),
         {:ok, type} <-
           enum(n, "concept_type", %{"entity" => "Entity", "abstract" => "Abstract"}, "entity"),
         {:ok, description} <- text(n, "description", l) do
      {:ok,
       %{
         "Semantic" => %{
           "content" => content,
           "aliases" => aliases,
           "concept_type" => type,
           "description" => description
         }
       }}
    end
  end

  defp payload("specific_situation", n, now, l) do
    with {:ok, narrative} <- text(n, "narrative", l, required: true),
         {:ok, time} <- time(n, now),
         {:ok, location} <- text(n, "location", l),
         {:ok, participants} <-
           objects(n, "participants", %{"name" => :text, "role" => :text}, l),
         {:ok, emotions} <- objects(n, "emotions", %{"name" => :text, "intensity" => :unit}, l),
         {:ok, events} <-
           objects(n, "events", %{"initiator" => :text, "action" => :text, "target" => :text}, l),
         {:ok, atmosphere} <- text(n, "atmosphere", l),
         {:ok, tone} <- text(n, "tone", l) do
      context = %{
        "location" =>
          if(location == "", do: nil, else: %{"name" => location, "coordinates" => ""}),
        "participants" => participants,
        "emotions" => Enum.map(emotions, &Map.put_new(&1, "intensity", 0.5)),
        "sensory_data" => [],
        "environment" => %{"atmosphere" => atmosphere, "tone" => tone},
        "event" =>
          Enum.map(events, fn e ->
            %{
              "action" => Map.get(e, "action", ""),
              "action_intensity" => 0.5,
              "initiator" => Map.get(e, "initiator", ""),
              "target" => Map.get(e, "target", "")
            }
          end)
      }

      with :ok <- required_in(participants, "participants", "name"),
           :ok <- required_in(emotions, "emotions", "name"),
           :ok <- required_in(events, "events", "action") do
        {:ok,
         %{
           "Situation" => %{
             "SpecificSituation" => %{
               "narrative" => narrative,
               "time_span" => time,
               "context" => context
             }
           }
         }}
      end
    end
  end

  defp payload("abstract_situation", n, _now, l) do
    with {:ok, facet} <- enum(n, "facet", @facets, nil),
         {:ok, name} <- text(n, "name", l, required: true),
         {:ok, detail} <- text(n, "detail", l) do
      body =
        case facet do
          "Participant" ->
            %{"name" => name, "role" => detail}

          "Location" ->
            %{"name" => name, "coordinates" => detail}

          "Event" ->
            %{"action" => name, "action_intensity" => 0.0, "initiator" => "", "target" => detail}

          "Environment" ->
            %{"atmosphere" => name, "tone" => detail}
        end

      {:ok, %{"Situation" => %{"AbstractSituation" => %{facet => body}}}}
    end
  end

  defp payload("procedure", n, _now, l) do
    with {:ok, content} <- text(n, "content", l, required: true),
         {:ok, type} <- enum(n, "action_type", @action_types, "skill") do
      {:ok, %{"Procedure" => %{"action" => %{"content" => content, "action_type" => type}}}}
    end
  end

  defp text(n, field, limits, opts \\ []) do
    case Map.get(n, field, "") do
      s when is_binary(s) ->
        s = String.trim(s)

        cond do
          not String.valid?(s) ->
            {:error, "#{field} is not valid UTF-8"}

          opts[:required] && s == "" ->
            {:error, "#{field} must not be empty"}

          String.length(s) > limits[:max_text] ->
            {:error, "#{field} is longer than #{limits[:max_text]} characters"}

          true ->
            {:ok, s}
        end

      other ->
        {:error, "#{field} must be a string, got #{inspect(other, limit: 5)}"}
    end
  end

  defp texts(n, field, limits) do
    max = limits[:max_list]

    case Map.get(n, field, []) do
      list when is_list(list) and length(list) <= max ->
        list
        |> Enum.with_index()
        |> Enum.reduce_while({:ok, []}, fn {s, i}, {:ok, acc} ->
          case text(%{"v" => s}, "v", limits, required: true) do
            {:ok, s} ->
              {:cont, {:ok, [s | acc]}}

            {:error, e} ->
              {:halt, {:error, "#{field}[#{i}]: " <> String.replace_prefix(e, "v ", "")}}
          end
        end)
        |> case do
          {:ok, acc} -> {:ok, acc |> Enum.reverse() |> Enum.uniq()}
          error -> error
        end

      list when is_list(list) ->
        {:error, "#{field} has more than #{limits[:max_list]} entries"}

      other ->
        {:error, "#{field} must be a list of strings, got #{inspect(other, limit: 5)}"}
    end
  end

  defp enum(n, field, allowed, default) do
    case Map.get(n, field, default) do
      v when is_binary(v) and is_map_key(allowed, v) ->
        {:ok, Map.fetch!(allowed, v)}

      v ->
        {:error,
         "#{field} must be one of #{allowed |> Map.keys() |> Enum.join(", ")}, got #{inspect(v, limit: 5)}"}
    end
  end

  defp time(n, now) do
    case Map.get(n, "time", "") do
      "" ->
        {:ok, nil}

      s when is_binary(s) ->
        case DateTime.from_iso8601(s) do
          {:ok, t, _offset} ->
            if DateTime.compare(t, now) == :gt,
              do: {:error, "time #{s} lies in the future"},
              else: {:ok, DateTime.to_iso8601(t)}

          {:error, _} ->
            {:error, "time must be an ISO 8601 timestamp with offset or \"\", got #{inspect(s)}"}
        end

      other ->
        {:error, "time must be a string, got #{inspect(other, limit: 5)}"}
    end
  end

  # A list of small objects with exactly the given fields (:text or :unit).
  defp objects(n, field, spec, limits) do
    max = limits[:max_list]

    case Map.get(n, field, []) do
      list when is_list(list) and length(list) <= max ->
        list
        |> Enum.with_index()
        |> Enum.reduce_while({:ok, []}, fn {item, i}, {:ok, acc} ->
          case object(item, spec, limits) do
            {:ok, obj} -> {:cont, {:ok, [obj | acc]}}
            {:error, e} -> {:halt, {:error, "#{field}[#{i}]: #{e}"}}
          end
        end)
        |> case do
          {:ok, acc} -> {:ok, Enum.reverse(acc)}
          error -> error
        end

      list when is_list(list) ->
        {:error, "#{field} has more than #{limits[:max_list]} entries"}

      other ->
        {:error, "#{field} must be a list, got #{inspect(other, limit: 5)}"}
    end
  end

  defp object(item, spec, limits) when is_map(item) do
    case Map.keys(item) -- Map.keys(spec) do
      [] ->
        Enum.reduce_while(item, {:ok, %{}}, fn {k, v}, {:ok, acc} ->
          case field(Map.fetch!(spec, k), k, v, limits) do
            {:ok, v} -> {:cont, {:ok, Map.put(acc, k, v)}}
            {:error, e} -> {:halt, {:error, e}}
          end
        end)

      extra ->
        {:error, "unknown fields #{Enum.join(extra, ", ")}"}
    end
  end

  defp object(item, _spec, _limits),
    do: {:error, "must be an object, got #{inspect(item, limit: 5)}"}

  defp field(:text, k, v, limits), do: text(%{k => v}, k, limits)

  defp field(:unit, _k, v, _limits) when is_number(v) and v >= 0 and v <= 1, do: {:ok, v / 1}

  defp field(:unit, k, v, _limits),
    do: {:error, "#{k} must be a number in [0, 1], got #{inspect(v, limit: 5)}"}

  defp required_in(items, field, key) do
    if Enum.all?(items, &(Map.get(&1, key, "") != "")),
      do: :ok,
      else: {:error, "every entry of #{field} needs a non-empty #{key}"}
  end

  ## Links

  @link_fields ~w(from to type relation strength)

  defp link(%{} = l, kinds, keys, limits) do
    with [] <- Enum.map(Map.keys(l) -- @link_fields, &"unknown field #{inspect(&1)}"),
         [] <- Enum.map(~w(from to type) -- Map.keys(l), &"missing field #{inspect(&1)}"),
         {:ok, type} <- link_type(l["type"]),
         {:ok, from, from_kind} <- endpoint(l["from"], kinds, keys),
         {:ok, to, to_kind} <- endpoint(l["to"], kinds, keys),
         :ok <- if(from == to, do: {:error, "a note cannot link to itself"}, else: :ok),
         {:ok, relation} <- text(l, "relation", limits),
         {:ok, strength} <- strength(l),
         :ok <- kinds_fit(type, from_kind, to_kind) do
      {:ok, change_links(type, from, to, relation, strength)}
    else
      {:error, e} -> {:error, List.wrap(e)}
      errors when is_list(errors) -> {:error, errors}
    end
  end

  defp link(other, _kinds, _keys, _limits),
    do: {:error, ["must be an object, got #{inspect(other, limit: 5)}"]}

  defp link_type(t) when t in @link_types, do: {:ok, t}

  defp link_type(t),
    do:
      {:error, "type must be one of #{Enum.join(@link_types, ", ")}, got #{inspect(t, limit: 5)}"}

  defp endpoint(id, kinds, keys) when is_binary(id) do
    cond do
      MapSet.member?(keys, id) -> {:ok, "new:" <> id, Map.fetch!(kinds, id)}
      Map.has_key?(kinds, id) -> {:ok, id, Map.fetch!(kinds, id)}
      true -> {:error, "#{inspect(id)} is neither a note key of this answer nor an offered id"}
    end
  end

  defp endpoint(id, _kinds, _keys),
    do: {:error, "from/to must be strings, got #{inspect(id, limit: 5)}"}

  defp strength(l) do
    case Map.get(l, "strength", 1.0) do
      v when is_number(v) and v >= 0 and v <= 1 -> {:ok, v / 1}
      v -> {:error, "strength must be a number in [0, 1], got #{inspect(v, limit: 5)}"}
    end
  end

  defp kinds_fit("relation", _from, _to), do: :ok

  defp kinds_fit("trigger", from, "procedure") when from != "procedure", do: :ok

  defp kinds_fit("instance_of", "specific_situation", "abstract_situation"), do: :ok

  defp kinds_fit(type, from, to),
    do: {:error, "a #{type} link cannot go from a #{from} to a #{to}"}

  defp change_links("relation", from, to, relation, strength) do
    verb = if relation == "", do: "相关", else: relation

    [
      %{
        "from" => from,
        "to" => to,
        "link_type" => %{"Sem" => %{"verb" => verb, "confidence" => strength}}
      }
    ]
  end

  defp change_links("trigger", from, to, _relation, strength),
    do: [
      %{
        "from" => from,
        "to" => to,
        "link_type" => %{"Proc" => %{"TrigToAction" => %{"prob" => strength}}}
      }
    ]

  defp change_links("instance_of", from, to, _relation, _strength) do
    [
      %{
        "from" => from,
        "to" => to,
        "link_type" => %{"Situation" => %{"SpecificToAbstract" => %{}}}
      },
      %{
        "from" => to,
        "to" => from,
        "link_type" => %{"Situation" => %{"AbstractToSpecific" => %{}}}
      }
    ]
  end
end
