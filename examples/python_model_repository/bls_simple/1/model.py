import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        calls = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            calls.append(
                pb_utils.InferenceRequest(
                    model_name="simple",
                    requested_output_names=["OUTPUT0", "OUTPUT1"],
                    inputs=[pb_utils.Tensor("INPUT0", a.reshape(1, 16)), pb_utils.Tensor("INPUT1", b.reshape(1, 16))],
                ).async_exec()
            )
        responses = []
        for call in calls:
            response = await call
            if response.has_error():
                responses.append(pb_utils.InferenceResponse(error=response.error()))
                continue
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor(name, pb_utils.get_output_tensor_by_name(response, name).as_numpy().reshape(16))
                        for name in ("OUTPUT0", "OUTPUT1")
                    ]
                )
            )
        return responses
