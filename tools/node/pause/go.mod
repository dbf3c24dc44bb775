module training-jobs/tools/node/pause

go 1.24
