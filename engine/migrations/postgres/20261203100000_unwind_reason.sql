-- Why a run turned back (`step `x` failed: ...`, or `cancelled by an operator`), written once when
-- it starts to unwind and kept to the end: undos read it (a record marked failed can say why), and
-- the run's final reason is built from it even after a park and a resume cleared `status_reason`.
ALTER TABLE engine_runs ADD COLUMN unwind_reason TEXT;
