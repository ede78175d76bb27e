# repeat_int32: for IN = [v0, v1, ...] sends one response per element, the i-th DELAY[i] ms after
# the previous one, with OUT = [v_i] and IDX = [i], then ends the request with a flag-only final
# response. execute returns after WAIT ms; the responses go on from a thread (a decoupled model).
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.inflight = []
        self.lock = threading.Lock()

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            if len(delays) != len(values):
                request.get_response_sender().send(
                    pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("expected DELAY to have as many elements as IN", pb_utils.TritonError.INVALID_ARG)
                    ),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            thread = threading.Thread(
                target=self.respond, args=(request.get_response_sender(), values.copy(), delays.copy()), daemon=True
            )
            with self.lock:
                self.inflight.append(thread)
            thread.start()
        wait = pb_utils.get_input_tensor_by_name(requests[-1], "WAIT").as_numpy()[0]
        time.sleep(wait / 1000)
        return None

    def respond(self, sender, values, delays):
        for i, (value, delay) in enumerate(zip(values, delays)):
            time.sleep(delay / 1000)
            if sender.is_cancelled():
                break
            sender.send(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                        pb_utils.Tensor("IDX", np.array([i], dtype=np.uint32)),
                    ]
                )
            )
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        with self.lock:
            threads = list(self.inflight)
        for thread in threads:
            thread.join()
