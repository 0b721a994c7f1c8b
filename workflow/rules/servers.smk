# vLLM server specs, one per model. The scoring jobs start (or reuse) the server through a lease:
# at most one server per model per run on a machine, and each cell still fails on its own
# (docs/servers.md explains why this is not a Snakemake service job).


def server_spec(model):
    m = model_conf(model)
    return {
        "name": model,
        "model": model_dir(model),
        "served_name": model,
        "python": CONFIG["server"]["python"],
        "dtype": m["dtype"],
        "max_model_len": m["max_model_len"],
        "max_logprobs": CONFIG["server"]["max_logprobs"],
        "tensor_parallel_size": m["tensor_parallel_size"],
        "seed": CONFIG["server"]["seed"],
        "prefix_caching": m["prefix_caching"],
        "extra_flags": m["server_flags"],
        "env": sorted(m["server_env"].items()),
        "start_timeout": m["start_timeout"],
        "port": m["port"],
    }


rule server_spec:
    output:
        "resources/servers/{model}.json",
    params:
        spec=lambda wc: server_spec(wc.model),
    localrule: True
    run:
        from anyjev.serving.argv import build_argv
        from anyjev.serving.spec import ServerSpec

        spec = dict(params.spec)
        # Refuses a config flag that would override a pinned one, naming the key path.
        build_argv(ServerSpec.from_dict(spec), 0)
        with open(output[0], "w") as fh:
            json.dump(spec, fh, indent=1, sort_keys=True)
