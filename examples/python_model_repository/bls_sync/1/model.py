# bls_sync: forwards INPUT0/INPUT1 to the model named in MODEL_NAME (add_sub, say) and returns its
# outputs. A failing call (an unknown model) fails this request with the callee's message.
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            model_name = pb_utils.get_input_tensor_by_name(request, "MODEL_NAME").as_numpy()[0].decode()
            response = pb_utils.InferenceRequest(
                model_name=model_name,
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
            ).exec()
            if response.has_error():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(response.error().message())))
                continue
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.get_output_tensor_by_name(response, "OUTPUT0"),
                        pb_utils.get_output_tensor_by_name(response, "OUTPUT1"),
                    ]
                )
            )
        return responses
