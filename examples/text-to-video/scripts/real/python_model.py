# Baseline (iii) of issue 51, NVIDIA's tutorial shape: the whole text-to-video loop inside one
# Python-backend model.py, served by Galley. generate-real-models.py --python-model copies this file
# to <repo>/text_to_video_python/1/model.py and pipeline.py beside it. Each request is one user's
# video, made alone (encoder, N denoiser steps at batch 1, VAE, Real-ESRGAN, interpolation) with
# the repository's TorchScript files loaded into this stub's own process (a second copy of the
# weights on the GPU); requests that arrive together run one after the other, as the tutorials'
# execute loops do. The text encoder, denoiser and VAE decoder are UNTRAINED.
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from pipeline import Models, Request, generate_one


class TritonPythonModel:
    def initialize(self, args):
        repository = os.path.dirname(args["model_repository"])
        gpu = args.get("model_instance_kind") == "GPU"
        self.models = Models(repository, f"cuda:{args['model_instance_device_id']}" if gpu else "cpu")

    def execute(self, requests):
        responses = []
        for request in requests:

            def value(name, default):
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is None:
                    return default
                item = tensor.as_numpy().reshape(-1)[0]
                return item.decode("utf-8") if isinstance(item, bytes) else item.item() if hasattr(item, "item") else item

            try:
                result = generate_one(
                    self.models,
                    Request(
                        value("PROMPT", ""),
                        value("RESOLUTION", "") or "256x256",
                        int(value("FRAMES", 16)),
                        int(value("STEPS", 20)),
                        value("SEED", None),
                    ),
                )
                video = result["video"].contiguous().cpu().numpy()
                responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("VIDEO", np.ascontiguousarray(video))]))
            except Exception as error:
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=pb_utils.TritonError(str(error))))
        return responses
